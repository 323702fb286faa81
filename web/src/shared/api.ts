import * as z from 'zod/mini';

// Every call answers a discriminated union instead of throwing: the pages show each
// failure to the user, so they must handle all of them. Bodies are parsed with zod,
// never trusted as-is.

export type ApiOk<T> = { ok: true; status: number; data: T; sentAt: number; receivedAt: number };
export type ApiFail = {
  ok: false;
  /** 0 when no HTTP answer arrived (network down, timeout). */
  status: number;
  /** The contract's code, or NETWORK / TIMEOUT / BAD_RESPONSE / HTTP_<status>. */
  code: string;
  message: string;
  requestId: string;
  /** From Retry-After, on 429 and 503. */
  retryAfterSeconds?: number;
  /** On a SOLD_OUT refused whole: the units still left (fewer than asked for). */
  remaining?: number;
};
export type ApiResult<T> = ApiOk<T> | ApiFail;

const ErrorBody = z.object({
  error: z.object({ code: z.string(), message: z.string(), requestId: z.optional(z.string()), remaining: z.optional(z.number()) }),
});

export type CallOptions = {
  method?: 'GET' | 'POST' | 'PUT' | 'DELETE';
  body?: unknown;
  /** A bearer token (shopper JWT or admin token). */
  auth?: string;
  headers?: Record<string, string>;
  timeoutMs?: number;
};

/** Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), if any. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (!value) {
    return undefined;
  }
  if (/^\d+$/.test(value.trim())) {
    return Number(value.trim());
  }
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - now) / 1000));
}

async function send(path: string, options: CallOptions): Promise<{ res: Response; sentAt: number; receivedAt: number } | ApiFail> {
  const headers: Record<string, string> = { accept: 'application/json', ...options.headers };
  if (options.auth) {
    headers.authorization = `Bearer ${options.auth}`;
  }
  let body: string | undefined;
  if (options.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(options.body);
  }
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), options.timeoutMs ?? 15_000);
  const sentAt = Date.now();
  try {
    const res = await fetch(path, { method: options.method ?? 'GET', headers, body, signal: controller.signal, cache: 'no-store' });
    return { res, sentAt, receivedAt: Date.now() };
  } catch (error) {
    const timedOut = error instanceof DOMException && error.name === 'AbortError';
    return {
      ok: false,
      status: 0,
      code: timedOut ? 'TIMEOUT' : 'NETWORK',
      message: timedOut ? 'the server did not answer in time' : 'the network is unreachable',
      requestId: '',
    };
  } finally {
    clearTimeout(timer);
  }
}

async function failure(res: Response): Promise<ApiFail> {
  const retryAfterSeconds = parseRetryAfter(res.headers.get('retry-after'));
  let parsed: unknown;
  try {
    parsed = await res.json();
  } catch {
    parsed = undefined;
  }
  const body = ErrorBody.safeParse(parsed);
  if (body.success) {
    return {
      ok: false,
      status: res.status,
      code: body.data.error.code,
      message: body.data.error.message,
      requestId: body.data.error.requestId ?? '',
      retryAfterSeconds,
      ...(body.data.error.remaining === undefined ? {} : { remaining: body.data.error.remaining }),
    };
  }
  return {
    ok: false,
    status: res.status,
    code: `HTTP_${res.status}`,
    message: res.statusText || `HTTP ${res.status}`,
    requestId: '',
    retryAfterSeconds,
  };
}

/** Calls a JSON route and parses a successful answer with `schema`. */
export async function callJson<S extends z.ZodMiniType>(
  path: string,
  schema: S,
  options: CallOptions = {},
): Promise<ApiResult<z.infer<S>>> {
  const sent = await send(path, options);
  if ('ok' in sent) {
    return sent;
  }
  const { res, sentAt, receivedAt } = sent;
  if (!res.ok) {
    return failure(res);
  }
  let json: unknown;
  try {
    json = await res.json();
  } catch {
    json = undefined;
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    return { ok: false, status: res.status, code: 'BAD_RESPONSE', message: `unexpected answer from ${path}`, requestId: '' };
  }
  return { ok: true, status: res.status, data: parsed.data, sentAt, receivedAt };
}

/** Calls a route that answers text (Prometheus metrics). */
export async function callText(path: string, options: CallOptions = {}): Promise<ApiResult<string>> {
  const sent = await send(path, { ...options, headers: { accept: 'text/plain', ...options.headers } });
  if ('ok' in sent) {
    return sent;
  }
  const { res, sentAt, receivedAt } = sent;
  if (!res.ok) {
    return failure(res);
  }
  return { ok: true, status: res.status, data: await res.text(), sentAt, receivedAt };
}

/** True when the route itself does not exist on this deployment (as opposed to a missing record). */
export function routeMissing(fail: ApiFail): boolean {
  return fail.status === 404 && /^no route for /.test(fail.message);
}
