// A streamed Message through the Anthropic SDK's stream helper, which rebuilds the
// message from its events and fails on an event out of place.
import Anthropic from '@anthropic-ai/sdk';
import { door, run, scenario } from './common.mjs';

run(async () => {
  const client = new Anthropic({ baseURL: door.url, apiKey: door.key, maxRetries: 0 });
  const stream = client.messages.stream({
    model: scenario.model,
    max_tokens: 256,
    messages: [{ role: 'user', content: scenario.prompt }],
    ...scenario.extra,
  });
  const texts = [];
  const events = [];
  stream.on('text', (text) => texts.push(text));
  stream.on('streamEvent', (event) => events.push(event.type));
  const message = await stream.finalMessage();
  return {
    texts,
    events,
    content: message.content,
    stop_reason: message.stop_reason,
    model: message.model,
    role: message.role,
    usage: message.usage,
  };
});
