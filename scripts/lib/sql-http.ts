// Neon's SQL-over-HTTP endpoint (`POST /sql`), served locally in front of a plain Postgres
// (PGlite or a real server), so the Worker can use `neon()` / `drizzle-orm/neon-http` as it
// does against Neon. In production Neon's proxy answers these requests and keeps warm
// connections behind them; here a warm `pg` Pool per connection string plays that part.
//
// The protocol, as the driver (@neondatabase/serverless 1.x) speaks it:
// - request headers: `Neon-Connection-String` (required), `Neon-Raw-Text-Output: true` (values
//   stay Postgres text; the driver parses them by type OID), `Neon-Array-Mode: true` (rows as
//   arrays), and for batches `Neon-Batch-Isolation-Level` (ReadUncommitted, ReadCommitted,
//   RepeatableRead, Serializable), `Neon-Batch-Read-Only`, `Neon-Batch-Deferrable`;
// - body: `{query, params, arrayMode?}`, or `{queries: [...]}` run in ONE transaction;
// - params: strings, or null; other JSON values become their Postgres text (arrays as array
//   literals, objects as JSON);
// - 200: `{command, rowCount, rows, fields: [{name, dataTypeID, tableID, columnID,
//   dataTypeSize, dataTypeModifier, format}], rowAsArray}`, or `{results: [...]}` for a batch;
// - 400: a Postgres error as JSON, `message` plus the server's fields (code, detail, hint,
//   position, ..., routine); bad requests too; other failures 5xx with `{message}`.
// A single query runs in its own implicit transaction, with the extended protocol (one
// statement per query, as on Neon).
import diagnostics from 'node:diagnostics_channel';
import type { IncomingMessage, ServerResponse } from 'node:http';
import pg from 'pg';
import { type JsonValue, paramText, type ResultJson, resultJson } from './sql-http-values.ts';

const MAX_BODY_BYTES = 10 * 1024 * 1024;
const MAX_RESPONSE_BYTES = 10 * 1024 * 1024;
/** Connections per connection string; PGlite serialises queries anyway. */
const POOL_MAX = 8;

const ISOLATION: Record<string, string> = {
  ReadUncommitted: 'READ UNCOMMITTED',
  ReadCommitted: 'READ COMMITTED',
  RepeatableRead: 'REPEATABLE READ',
  Serializable: 'SERIALIZABLE',
};

const ERROR_FIELDS = [
  'code',
  'detail',
  'hint',
  'position',
  'internalPosition',
  'internalQuery',
  'severity',
  'where',
  'table',
  'column',
  'schema',
  'dataType',
  'constraint',
  'file',
  'line',
  'routine',
] as const satisfies readonly (keyof pg.DatabaseError)[];

/** What `requestChannel` publishes for each answered request. */
export type SqlHttpTiming = { ms: number; waitMs: number; queryMs: number; status: number; statements: number };

/**
 * Each answered request is published here (`{ ms, waitMs, queryMs, status, statements }`) when
 * someone listens, e.g. the bench's per-batch breakdown; nothing is measured otherwise.
 */
export const requestChannel = diagnostics.channel('edge-seckill:sql-http');

/** Values stay the server's text; the client parses them by type. */
const RAW_TEXT = { getTypeParser: () => (value: string) => value };

/**
 * One query as pg runs it: rows as arrays of raw text, always the extended protocol (pg's
 * `queryMode`, which its type declarations do not list).
 */
function statement(q: { query: string; params: (string | null)[] }): pg.QueryArrayConfig & { queryMode: 'extended' } {
  return { text: q.query, values: q.params, rowMode: 'array', types: RAW_TEXT, queryMode: 'extended' };
}

/** An error answered to the client with its HTTP status and JSON body. */
type ErrorJson = { message: string } & Record<string, unknown>;

class HttpError extends Error {
  readonly status: number;
  readonly body: ErrorJson;
  constructor(status: number, body: ErrorJson) {
    super(body.message);
    this.status = status;
    this.body = body;
  }
}

const badRequest = (message: string) => new HttpError(400, { message, code: '' });

type Query = { query: string; params: (string | null)[]; arrayMode: boolean | undefined };
type Payload = { single: Query; batch?: undefined } | { single?: undefined; batch: Query[] };
type Timing = { waitMs: number; queryMs: number; statements: number };
type Answer = { body: ResultJson | { results: ResultJson[] }; headers: Record<string, string> };

/** A Postgres error (from the server) as Neon answers it; anything else is the bridge's own 5xx. */
function errorResponse(error: unknown): HttpError {
  if (error instanceof HttpError) {
    return error;
  }
  if (error instanceof pg.DatabaseError) {
    const body: ErrorJson = { message: error.message };
    for (const key of ERROR_FIELDS) {
      body[key] = error[key] ?? null;
    }
    return new HttpError(400, body);
  }
  return new HttpError(500, { message: `Postgres is unreachable: ${error instanceof Error ? error.message : String(error)}`, code: '' });
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name.toLowerCase()];
  return Array.isArray(v) ? v[0] : v;
}

/** The whole body; past the limit it is drained and refused, so the answer still reaches the client. */
function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) {
        chunks.push(chunk);
      }
    });
    req.on('end', () => {
      if (size > MAX_BODY_BYTES) {
        reject(new HttpError(413, { message: `request body is too large (max is ${MAX_BODY_BYTES} bytes)`, code: '' }));
      } else {
        resolve(Buffer.concat(chunks).toString('utf8'));
      }
    });
    req.on('error', reject);
  });
}

/** `value[key]` of a parsed JSON object, undefined for anything else. */
function field(value: JsonValue | undefined, key: string): JsonValue | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? value[key] : undefined;
}

function parsePayload(text: string): Payload {
  let payload: JsonValue;
  try {
    payload = JSON.parse(text);
  } catch (error) {
    throw badRequest(`request body is not JSON: ${error instanceof Error ? error.message : String(error)}`);
  }
  const check = (q: JsonValue | undefined): Query => {
    const query = field(q, 'query');
    const params = field(q, 'params');
    const arrayMode = field(q, 'arrayMode');
    if (!q || typeof query !== 'string') {
      throw badRequest('each query needs a "query" string');
    }
    if (params !== undefined && !Array.isArray(params)) {
      throw badRequest('"params" must be an array');
    }
    return {
      query,
      params: (params ?? []).map(paramText),
      arrayMode: typeof arrayMode === 'boolean' ? arrayMode : undefined,
    };
  };
  const queries = field(payload, 'queries');
  if (payload && Array.isArray(queries)) {
    return { batch: queries.map(check) };
  }
  return { single: check(payload) };
}

/**
 * Ends a pool and waits until its connections are closed (pool.end() resolves before that). A
 * client still connecting (to a server that never answers) leaves the pool without a 'remove'
 * when its connect fails: the count is read again rather than the events counted.
 */
async function endPool(pool: pg.Pool): Promise<void> {
  const ended = pool.end().catch(() => {});
  const deadline = Date.now() + END_POOL_MS;
  while (pool.totalCount > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  await Promise.race([ended, new Promise((resolve) => setTimeout(resolve, Math.max(0, deadline - Date.now())))]);
}

/** How long ending a pool waits for its connections (a connect to a silent server never ends on its own). */
const END_POOL_MS = 5_000;

export type SqlOverHttp = { handle(req: IncomingMessage, res: ServerResponse): Promise<void>; close(): Promise<void> };

/** The `/sql` handler. Only servers in `allow` ("host:port") are reachable. */
export function sqlOverHttp({ allow }: { allow: Iterable<string> }): SqlOverHttp {
  const allowed = new Set(allow);
  /** Warm pools by connection string. */
  const pools = new Map<string, pg.Pool>();

  function poolFor(connectionString: string): pg.Pool {
    let pool = pools.get(connectionString);
    if (pool) {
      return pool;
    }
    let url: URL;
    try {
      url = new URL(connectionString);
    } catch {
      throw badRequest('Neon-Connection-String is not a valid URL');
    }
    if (!/^postgres(ql)?:$/.test(url.protocol) || !url.hostname) {
      throw badRequest('Neon-Connection-String must be a postgres:// URL with a host');
    }
    const target = `${url.hostname}:${url.port || 5432}`;
    if (!allowed.has(target)) {
      throw badRequest(`${target} is not a database this endpoint serves`);
    }
    pool = new pg.Pool({ connectionString, max: POOL_MAX, idleTimeoutMillis: 30_000 });
    // An idle client's socket error must not take the bridge down; the pool drops that client.
    pool.on('error', () => {});
    // Nor a checked-out one's: the pool hears only idle clients, and a server that ends its
    // connections (a restart, pg_terminate_backend) sends each a FATAL 57P01, which a client with
    // no statement running emits as an 'error' event. Its next statement fails, the request
    // releases it as broken, and the pool drops it (a Postgres outage in the chaos run killed
    // the whole process here).
    pool.on('connect', (client) => {
      client.on('error', () => {});
    });
    pools.set(connectionString, pool);
    return pool;
  }

  const run = (client: pg.PoolClient, q: Query, rawText: boolean, defaultArrayMode: boolean): Promise<ResultJson> =>
    client
      .query<(string | null)[]>(statement(q))
      .then((result) => resultJson(result, { arrayMode: q.arrayMode ?? defaultArrayMode, rawText }));

  async function answer(req: IncomingMessage, timing: Timing): Promise<Answer> {
    const text = await readBody(req);
    const connectionString = header(req, 'Neon-Connection-String');
    if (!connectionString) {
      throw badRequest('missing Neon-Connection-String header');
    }
    const rawText = header(req, 'Neon-Raw-Text-Output') === 'true';
    const arrayMode = header(req, 'Neon-Array-Mode') === 'true';
    const isolationHeader = header(req, 'Neon-Batch-Isolation-Level');
    const isolation = isolationHeader === undefined ? undefined : ISOLATION[isolationHeader];
    if (isolationHeader !== undefined && !isolation) {
      throw badRequest('invalid isolation level');
    }
    const readOnly = header(req, 'Neon-Batch-Read-Only') === 'true';
    const deferrable = header(req, 'Neon-Batch-Deferrable') === 'true';
    const payload = parsePayload(text);
    const pool = poolFor(connectionString);
    const waitStarted = performance.now();
    const client = await pool.connect();
    timing.waitMs = performance.now() - waitStarted;
    timing.statements = payload.single ? 1 : payload.batch.length;
    let broken: Error | undefined;
    try {
      if (payload.single) {
        const body = await run(client, payload.single, rawText, arrayMode);
        // A statement that left a transaction open (a lone BEGIN) must not leak into the next request.
        if (client.getTransactionStatus() !== 'I') {
          broken = new Error('connection left inside a transaction');
        }
        return { body, headers: {} };
      }
      const modes = [isolation && `ISOLATION LEVEL ${isolation}`, readOnly && 'READ ONLY', deferrable && 'DEFERRABLE'].filter(Boolean);
      await client.query(`BEGIN${modes.length ? ` ${modes.join(' ')}` : ''}`);
      try {
        const results: ResultJson[] = [];
        for (const q of payload.batch) {
          results.push(await run(client, q, rawText, arrayMode));
        }
        await client.query('COMMIT');
        const headers: Record<string, string> = {};
        if (isolation && isolationHeader) {
          headers['Neon-Batch-Isolation-Level'] = isolationHeader;
        }
        if (readOnly) {
          headers['Neon-Batch-Read-Only'] = 'true';
        }
        if (deferrable) {
          headers['Neon-Batch-Deferrable'] = 'true';
        }
        return { body: { results }, headers };
      } catch (error) {
        await client.query('ROLLBACK').catch((rollbackError: unknown) => {
          broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
        });
        throw error;
      }
    } catch (error) {
      // A failure that is not the server's answer leaves the connection in an unknown state; a
      // FATAL answer (57P01 when the server ends the backend) is the connection's last word.
      if (!(error instanceof pg.DatabaseError) || error.severity === 'FATAL' || error.severity === 'PANIC') {
        broken = error instanceof Error ? error : new Error(String(error));
      }
      throw error;
    } finally {
      client.release(broken);
      timing.queryMs = performance.now() - waitStarted - timing.waitMs;
    }
  }

  return {
    async handle(req, res) {
      const started = performance.now();
      const timing: Timing = { waitMs: 0, queryMs: 0, statements: 0 };
      let status = 200;
      let body: Answer['body'] | ErrorJson;
      let headers: Record<string, string> = {};
      if (req.method !== 'POST') {
        status = 405;
        body = { message: 'use POST', code: '' };
        req.resume();
      } else {
        try {
          ({ body, headers } = await answer(req, timing));
        } catch (error) {
          const e = errorResponse(error);
          status = e.status;
          body = e.body;
        }
      }
      let text = JSON.stringify(body);
      if (status === 200 && Buffer.byteLength(text) > MAX_RESPONSE_BYTES) {
        status = 507;
        text = JSON.stringify({ message: `response is too large (max is ${MAX_RESPONSE_BYTES} bytes)`, code: '' });
      }
      res.writeHead(status, {
        ...headers,
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(text),
        'access-control-allow-origin': '*',
      });
      res.end(text);
      if (requestChannel.hasSubscribers) {
        requestChannel.publish({ ms: performance.now() - started, ...timing, status } satisfies SqlHttpTiming);
      }
    },
    async close() {
      const all = [...pools.values()];
      pools.clear();
      await Promise.all(all.map(endPool));
    },
  };
}
