// A tool-calling exchange through the OpenAI SDK's tool runner, streamed: the runner
// assembles the call from its argument fragments, runs the function, sends the result
// back and streams the model's answer.
import OpenAI from 'openai';
import { door, run, scenario, weather, weatherSchema } from './common.mjs';

run(async () => {
  const client = new OpenAI({ baseURL: `${door.url}/v1`, apiKey: door.key, maxRetries: 0 });
  const calls = [];
  const runner = client.chat.completions.runTools({
    model: scenario.model,
    stream: true,
    messages: [{ role: 'user', content: scenario.prompt }],
    tools: [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'The weather in a city',
          parameters: weatherSchema,
          parse: JSON.parse,
          function: weather(calls),
        },
      },
    ],
    ...scenario.extra,
  });
  const content = await runner.finalContent();
  const completions = runner.allChatCompletions();
  return {
    calls,
    content,
    finish_reasons: completions.map((c) => c.choices[0].finish_reason),
    // The conversation as the runner kept it: the assistant's call, the tool's answer.
    messages: runner.messages.map((m) => ({
      role: m.role,
      tool_calls: (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })),
      tool_call_id: m.tool_call_id ?? null,
    })),
  };
});
