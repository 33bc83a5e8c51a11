// What every exchange script shares: where the door is, the scenario the pytest test
// chose, and one JSON line out (or the SDK's error on stderr and exit status 1).

export const door = { url: process.env.TL_DOOR_URL, key: process.env.TL_DOOR_KEY };

// { model, prompt, extra }: `extra` goes into the request body as it is (trunkline's
// own `provider_options`, which scripts the mock), as an application would add a field
// the SDK's types do not know.
export const scenario = JSON.parse(process.env.TL_SCENARIO ?? '{}');

export async function run(exchange) {
  try {
    const out = await exchange();
    process.stdout.write(JSON.stringify(out) + '\n');
  } catch (err) {
    const status = err?.status ? ` (HTTP ${err.status})` : '';
    process.stderr.write(`${err?.constructor?.name ?? 'Error'}${status}: ${err?.message ?? err}\n`);
    process.exitCode = 1;
  }
}

// The tool both SDKs' exchanges call: what it was given comes back in the output, so
// the test sees the arguments the model's call carried through the door.
export const weatherSchema = {
  type: 'object',
  properties: { city: { type: 'string' } },
  required: ['city'],
};

export function weather(calls) {
  return (input) => {
    calls.push(input);
    return { city: input.city, temperature_c: 21 };
  };
}
