// Structured JSON logs (one object per line), which Workers Observability indexes by field.
type Fields = Record<string, unknown>;

/** An error with its causes (drivers wrap the interesting one). */
function describeError(e: Error, depth = 0): Record<string, unknown> {
  const cause = e.cause instanceof Error && depth < 3 ? { cause: describeError(e.cause, depth + 1) } : {};
  return { name: e.name, message: e.message.slice(0, 500), ...cause };
}

function serialise(fields: Fields): Fields {
  const out: Fields = {};
  for (const [k, v] of Object.entries(fields)) {
    out[k] = v instanceof Error ? describeError(v) : v;
  }
  return out;
}

function emit(level: 'debug' | 'info' | 'warn' | 'error', event: string, fields: Fields): void {
  const line = JSON.stringify({ level, event, time: new Date().toISOString(), ...serialise(fields) });
  if (level === 'error') {
    console.error(line);
  } else if (level === 'warn') {
    console.warn(line);
  } else {
    console.log(line);
  }
}

export const log = {
  info: (event: string, fields: Fields = {}) => emit('info', event, fields),
  warn: (event: string, fields: Fields = {}) => emit('warn', event, fields),
  error: (event: string, fields: Fields = {}) => emit('error', event, fields),
};
