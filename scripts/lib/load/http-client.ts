// A small keep-alive HTTP client for the load tools. It never throws: a network error or a
// timeout comes back as status 0 with `error` set, so a load run counts failures instead of
// stopping on the first one.
import http, { type IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import { errorOf } from './contract.ts';

/** What a request got back; `json` is the parsed body when it was JSON (unchecked). */
export type Answer = {
  status: number;
  body: string;
  json: unknown;
  ms: number;
  headers: IncomingHttpHeaders;
  error?: string;
  /** With `error`: what the request went out on, and when it failed (epoch ms), to line it up with the server's log. */
  failure?: {
    connection: 'kept-alive' | 'new' | 'new, after a kept-alive one was closed';
    at: number;
    /** Node's message: "socket hang up" when the server closed the connection, "read ECONNRESET" when it was reset. */
    message?: string | undefined;
  };
};
export type RequestInit = { headers?: Record<string, string>; body?: string | Buffer; json?: unknown; timeoutMs?: number };
export type HttpClient = ReturnType<typeof httpClient>;

type Attempt = Omit<Answer, 'ms'> & { staleSocket?: boolean };

/** `baseUrl` e.g. http://127.0.0.1:8787 (a path prefix is kept). */
export function httpClient(
  baseUrl: string,
  {
    maxSockets = 100,
    timeoutMs = 10_000,
    headers: defaultHeaders = {},
  }: {
    maxSockets?: number;
    timeoutMs?: number /** Sent with every request (a request's own win). */;
    headers?: Record<string, string>;
  } = {},
) {
  const base = new URL(baseUrl);
  const secure = base.protocol === 'https:';
  const transport = secure ? https : http;
  const agent = new transport.Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets });
  const prefix = base.pathname.replace(/\/$/, '');

  async function request(method: string, path: string, init: RequestInit = {}): Promise<Answer> {
    const answer = await once(method, path, init);
    if (answer.staleSocket) {
      // The server had closed this kept-alive connection before our request went out on it
      // (workerd closes a connection whose request body a handler did not read). The request
      // never reached it; a browser sends it again on a new connection, and so do we: a new one,
      // not the pool's next, which the server may have closed the same way.
      stats.staleRetries++;
      const again = await once(method, path, init, true);
      if (again.failure) {
        again.failure.connection = 'new, after a kept-alive one was closed';
      }
      return again;
    }
    return answer;
  }

  const stats = { staleRetries: 0 };
  /**
   * Sockets that have carried an answer. Node marks a request `reusedSocket` only when it takes
   * a free socket from the pool; one that waited in the agent's queue (every socket busy) is
   * handed the next socket freed, kept alive after its answer, unmarked, and the server may
   * close that one under it just the same.
   */
  const served = new WeakSet<object>();

  function once(method: string, path: string, init: RequestInit, newConnection = false): Promise<Answer & { staleSocket?: boolean }> {
    const headers: Record<string, string> = { ...defaultHeaders, ...init.headers };
    let body = init.body;
    if (init.json !== undefined) {
      body = JSON.stringify(init.json);
      headers['content-type'] ??= 'application/json';
    }
    if (body !== undefined) {
      headers['content-length'] = String(Buffer.byteLength(body));
    }
    const started = performance.now();
    return new Promise((resolve) => {
      let settled = false;
      let responded = false;
      let usedBefore = false;
      let carrier: object | undefined;
      const finish = (answer: Attempt) => {
        if (!settled) {
          settled = true;
          resolve({ ...answer, ms: performance.now() - started });
        }
      };
      const req = transport.request(
        {
          protocol: base.protocol,
          hostname: base.hostname,
          port: base.port || (secure ? 443 : 80),
          method,
          path: prefix + path,
          headers,
          // No agent: a connection of its own, closed after its answer.
          agent: newConnection ? false : agent,
        },
        (res) => {
          responded = true;
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            if (carrier) {
              served.add(carrier);
            }
            const text = Buffer.concat(chunks).toString('utf8');
            let json: unknown;
            try {
              json = text ? JSON.parse(text) : undefined;
            } catch {
              json = undefined;
            }
            finish({ status: res.statusCode ?? 0, body: text, json, headers: res.headers });
          });
          res.on('error', (e: NodeJS.ErrnoException) =>
            finish({ status: 0, body: '', json: undefined, headers: {}, error: e.code ?? e.message, failure: failure(e.message) }),
          );
        },
      );
      req.on('socket', (socket) => {
        carrier = socket;
        usedBefore = req.reusedSocket || served.has(socket);
      });
      const failure = (message?: string) => ({ connection: usedBefore ? 'kept-alive' : 'new', at: Date.now(), message }) as const;
      req.setTimeout(init.timeoutMs ?? timeoutMs, () => {
        req.destroy();
        finish({ status: 0, body: '', json: undefined, headers: {}, error: 'timeout', failure: failure() });
      });
      req.on('error', (e: NodeJS.ErrnoException) => {
        const stale = usedBefore && !responded && (e.code === 'ECONNRESET' || e.code === 'EPIPE');
        finish({
          status: 0,
          body: '',
          json: undefined,
          headers: {},
          error: e.code ?? e.message,
          failure: failure(e.message),
          staleSocket: stale,
        });
      });
      req.end(body);
    });
  }

  return {
    url: base.toString().replace(/\/$/, ''),
    request,
    /** Requests sent again because their kept-alive connection had been closed under them. */
    get staleRetries() {
      return stats.staleRetries;
    },
    get: (path: string, init?: RequestInit) => request('GET', path, init),
    post: (path: string, init?: RequestInit) => request('POST', path, init),
    put: (path: string, init?: RequestInit) => request('PUT', path, init),
    close: () => agent.destroy(),
  };
}

/** The contract's error code of an answer (`{"error":{"code":...}}`), if it has one. */
export function errorCode(answer: Pick<Answer, 'json'>): string | undefined {
  return errorOf(answer.json)?.code;
}

/** "202", "410 SOLD_OUT", "0 timeout": how outcomes are counted. */
export function outcomeKey(answer: Pick<Answer, 'status' | 'json' | 'error'>): string {
  if (answer.status === 0) {
    return `0 ${answer.error ?? 'error'}`;
  }
  const code = errorCode(answer);
  return code ? `${answer.status} ${code}` : String(answer.status);
}
