// A tool-calling exchange through the Anthropic SDK: the first turn streamed (the
// helper joins the `input_json_delta` fragments into the call's input), the tool run
// here, its result sent back in a `tool_result` block, the answer as a whole message.
import Anthropic from '@anthropic-ai/sdk';
import { door, run, scenario, weather, weatherSchema } from './common.mjs';

run(async () => {
  const client = new Anthropic({ baseURL: door.url, apiKey: door.key, maxRetries: 0 });
  const calls = [];
  const getWeather = weather(calls);
  const tools = [{ name: 'get_weather', description: 'The weather in a city', input_schema: weatherSchema }];
  const messages = [{ role: 'user', content: scenario.prompt }];
  const first = await client.messages
    .stream({ model: scenario.model, max_tokens: 256, tools, messages, ...scenario.extra })
    .finalMessage();
  const uses = first.content.filter((block) => block.type === 'tool_use');
  messages.push({ role: 'assistant', content: first.content });
  messages.push({
    role: 'user',
    content: uses.map((use) => ({
      type: 'tool_result',
      tool_use_id: use.id,
      content: JSON.stringify(getWeather(use.input)),
    })),
  });
  const second = await client.messages.create({
    model: scenario.model,
    max_tokens: 256,
    tools,
    messages,
    ...scenario.extra,
  });
  return {
    calls,
    first: { stop_reason: first.stop_reason, tool_uses: uses.map((u) => ({ id: u.id, name: u.name, input: u.input })) },
    second: { stop_reason: second.stop_reason, content: second.content },
  };
});
