// A streamed Chat Completion through the OpenAI SDK's stream helper, which rebuilds the
// completion from the chunks and fails on chunks out of order.
import OpenAI from 'openai';
import { door, run, scenario } from './common.mjs';

run(async () => {
  const client = new OpenAI({ baseURL: `${door.url}/v1`, apiKey: door.key, maxRetries: 0 });
  const stream = client.chat.completions.stream({
    model: scenario.model,
    messages: [{ role: 'user', content: scenario.prompt }],
    ...scenario.extra,
  });
  const deltas = [];
  const events = [];
  stream.on('content.delta', ({ delta }) => deltas.push(delta));
  stream.on('content.done', () => events.push('content.done'));
  stream.on('chunk', (chunk) => events.push(chunk.choices.length ? 'chunk' : 'usage chunk'));
  const completion = await stream.finalChatCompletion();
  const choice = completion.choices[0];
  return {
    deltas,
    events,
    content: choice.message.content,
    finish_reason: choice.finish_reason,
    model: completion.model,
    usage: completion.usage ?? null,
  };
});
