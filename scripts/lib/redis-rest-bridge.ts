// An Upstash-REST-compatible HTTP front for a real redis-server, so @upstash/redis can be
// used locally and in tests. Protocol notes: /work/shared/TOOLCHAIN-NOTES.md.
import { timingSafeEqual } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import ioredis, { type RedisOptions } from 'ioredis';

// ioredis is CommonJS: its module.exports (the default import) carries the named exports too,
// and only that form works both under Node and under vitest's module runner, which resolves
// it for the Worker tests' global setup. Its declarations type only the default as the class.
const { Command, Redis } = ioredis as unknown as typeof import('ioredis');
type Redis = InstanceType<typeof Redis>;

// ioredis reshapes some replies (HGETALL becomes an object); the REST protocol wants
// redis' own reply, as Buffers so binary values survive until we encode them.
class RawCommand extends Command {
  override transformReply(reply: Buffer | Buffer[]): Buffer | Buffer[] {
    return reply;
  }
}

/** A reply as redis sent it: bulk strings as Buffers, integers, nil, arrays, nested errors. */
type Reply = Buffer | number | null | Error | Reply[];
type JsonReply = string | number | null | JsonReply[];
type Item = { result: JsonReply } | { error: string };
type Answer = [status: number, payload: unknown];

// Commands that change the state of a shared connection (or block it) would leak into
// every other request multiplexed on it, so they are refused.
const REFUSED = new Set(
  'multi exec discard watch unwatch select quit reset hello auth monitor client subscribe psubscribe ssubscribe unsubscribe punsubscribe sunsubscribe blpop brpop brpoplpush blmove blmpop bzpopmin bzpopmax bzmpop wait waitaof'.split(
    ' ',
  ),
);

class HttpError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

/** A redis error reply (as opposed to a connection failure). */
const isReplyError = (err: unknown): err is Error => err instanceof Error && err.name === 'ReplyError';

/** Parse one `["CMD", ...args]` into strings, or throw a 400. */
function toCommand(value: unknown): [string, ...string[]] {
  const name: unknown = Array.isArray(value) ? value[0] : undefined;
  const ok =
    Array.isArray(value) &&
    typeof name === 'string' &&
    name !== '' &&
    value.every((a: unknown) => ['string', 'number', 'boolean'].includes(typeof a));
  if (!ok) {
    throw new HttpError(400, 'ERR a command must be a non-empty JSON array of strings');
  }
  if (REFUSED.has(name.toLowerCase())) {
    throw new HttpError(400, `ERR '${name}' is not supported by the REST bridge`);
  }
  return [name, ...value.slice(1).map(String)];
}

function toCommandList(value: unknown): [string, ...string[]][] {
  if (!Array.isArray(value)) {
    throw new HttpError(400, 'ERR body must be a JSON array of commands');
  }
  return value.map(toCommand);
}

/**
 * Reply value -> JSON value, mirroring what @upstash/redis decodes: with base64 every
 * string is base64 except a top-level "OK" (the client keeps a top-level "OK" as is but
 * base64-decodes every string inside arrays, so there "OK" must be encoded too).
 */
function encode(value: Reply | undefined, base64: boolean, depth = 0): JsonReply {
  if (Buffer.isBuffer(value)) {
    const text = value.toString('utf8');
    return base64 && !(depth === 0 && text === 'OK') ? value.toString('base64') : text;
  }
  if (Array.isArray(value)) {
    return value.map((v) => encode(v, base64, depth + 1));
  }
  // An error nested in an array (e.g. a Lua table): JSON has no error type, keep its text.
  if (isReplyError(value)) {
    return encode(Buffer.from(value.message), base64, depth);
  }
  return value ?? null; // integers stay numbers, nil is null
}

/** One reply -> `{result}` or, for a redis error, `{error}` (never base64: the client reads it as is). */
const toItem = (reply: Reply, base64: boolean): Item =>
  isReplyError(reply) ? { error: reply.message } : { result: encode(reply, base64) };

/** Settled sends -> replies; a connection failure (not a redis error) fails the request. */
function repliesOf(settled: PromiseSettledResult<Reply>[]): Reply[] {
  return settled.map((s) => {
    if (s.status === 'rejected' && !isReplyError(s.reason)) {
      throw s.reason;
    }
    return s.status === 'fulfilled' ? s.value : s.reason;
  });
}

export type RedisRestBridge = { url: string; port: number; token: string; close(): Promise<void> };
export type RedisRestBridgeOptions = { redisUrl?: string; port?: number; host?: string; token: string };

/** Start the bridge; resolves once listening (and redis is ready or has failed once). */
export async function startRedisRestBridge({
  redisUrl = 'redis://127.0.0.1:6379',
  port = 0,
  host = '127.0.0.1',
  token,
}: RedisRestBridgeOptions): Promise<RedisRestBridge> {
  if (typeof token !== 'string' || token === '') {
    throw new TypeError('startRedisRestBridge: a non-empty token is required');
  }
  const options: RedisOptions = {
    // Fail fast while redis is down instead of queueing requests that would hang.
    enableOfflineQueue: false,
    // A dropped connection rejects its in-flight commands at once; resending them could
    // run an INCR twice, or the tail of a MULTI outside its transaction.
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    // Reconnection itself uses ioredis' default: forever, with backoff up to 2 s.
  };
  // One connection for single commands and pipelines (ioredis pipelines on it anyway),
  // one for transactions so a MULTI...EXEC block never shares a stream with them.
  const conn = new Redis(redisUrl, options);
  const txConn = new Redis(redisUrl, options);
  let up = true; // log an outage once, not on every reconnect attempt
  conn.on('error', (err: Error) => {
    if (up) {
      console.warn(`[redis-rest-bridge] redis unavailable (${err.message}); reconnecting`);
    }
    up = false;
  });
  conn.on('ready', () => {
    up = true;
  });
  txConn.on('error', () => {}); // reported once via `conn`
  // Wait for the first connect so early requests do not fail; a dead redis must not block start.
  await Promise.all([conn, txConn].map((c) => once(c, 'ready').catch(() => {})));

  // Typed by what RawCommand hands back: redis' own reply, never reshaped.
  const send = (c: Redis, [name, ...args]: [string, ...string[]]) => c.sendCommand(new RawCommand(name, args)) as Promise<Reply>;

  const handlers: Record<string, (body: unknown, base64: boolean) => Promise<Answer>> = {
    async '/'(body, base64) {
      try {
        return [200, { result: encode(await send(conn, toCommand(body)), base64) }];
      } catch (err) {
        if (isReplyError(err)) {
          return [400, { error: err.message }];
        }
        throw err;
      }
    },
    async '/pipeline'(body, base64) {
      const sent = toCommandList(body).map((c) => send(conn, c));
      return [200, repliesOf(await Promise.allSettled(sent)).map((r) => toItem(r, base64))];
    },
    async '/multi-exec'(body, base64) {
      const commands = toCommandList(body);
      // All sends happen in this one tick, so ioredis writes MULTI...EXEC contiguously and
      // concurrent transactions cannot interleave on the transaction connection.
      const block: [string, ...string[]][] = [['MULTI'], ...commands, ['EXEC']];
      const sent = block.map((c) => send(txConn, c));
      const replies = repliesOf(await Promise.allSettled(sent));
      const exec = replies.at(-1);
      if (isReplyError(exec)) {
        // EXECABORT: nothing ran. Name the queueing error that caused it.
        const cause = replies.slice(1, -1).find(isReplyError);
        return [400, { error: cause ? `${exec.message} ${cause.message}` : exec.message }];
      }
      return [200, Array.isArray(exec) ? exec.map((r) => toItem(r, base64)) : []];
    },
  };

  const server = createServer((req, res) => {
    // Not floating: every outcome, failures included, ends in the .then that replies.
    void handle(req)
      .catch(
        (err: unknown): Answer =>
          err instanceof HttpError
            ? [err.status, { error: err.message }]
            : // Anything that is not a redis error reply means redis is unreachable.
              [503, { error: `ERR redis unavailable: ${err instanceof Error ? err.message : String(err)}` }],
      )
      .then(([status, payload]) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(payload));
      });
  });

  const expected = Buffer.from(`Bearer ${token}`);
  async function handle(req: IncomingMessage): Promise<Answer> {
    const given = Buffer.from(req.headers.authorization ?? '');
    // Constant-time compare: the token is the only thing guarding the database.
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      return [401, { error: 'Unauthorized' }];
    }
    const path = new URL(req.url ?? '/', 'http://bridge').pathname.replace(/(.)\/+$/, '$1');
    const handler = Object.hasOwn(handlers, path) ? handlers[path] : undefined;
    if (!handler) {
      return [404, { error: `ERR unknown path ${path}` }];
    }
    if (req.method !== 'POST') {
      return [405, { error: 'ERR only POST is supported' }];
    }
    const chunks: Buffer[] = [];
    for await (const chunk of req) {
      chunks.push(chunk);
    }
    let body: unknown;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      throw new HttpError(400, 'ERR request body is not valid JSON');
    }
    return handler(body, String(req.headers['upstash-encoding']).toLowerCase() === 'base64');
  }

  server.listen(port, host);
  await once(server, 'listening');
  const { port: boundPort } = server.address() as AddressInfo;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${boundPort}`,
    port: boundPort,
    token,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // In-flight requests get a moment; idle keep-alive sockets must not delay shutdown.
      const cut = setTimeout(() => server.closeAllConnections(), 1000);
      await closed;
      clearTimeout(cut);
      conn.disconnect();
      txConn.disconnect();
    },
  };
}
