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
import pg from 'pg';

const MAX_BODY_BYTES = 10 * 1024 * 1024;
const MAX_RESPONSE_BYTES = 10 * 1024 * 1024;
/** Connections per connection string; PGlite serialises queries anyway. */
const POOL_MAX = 8;

const ISOLATION = {
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
];

/**
 * Each answered request is published here (`{ ms, waitMs, queryMs, status, statements }`) when
 * someone listens, e.g. the bench's per-batch breakdown; nothing is measured otherwise.
 */
export const requestChannel = diagnostics.channel('edge-seckill:sql-http');

/** Values stay the server's text; the client parses them by type. */
const RAW_TEXT = { getTypeParser: () => (value) => value };

/** Element type of the array types JSON output understands (others stay text). */
const ARRAY_ELEMENT = {
  1000: 16, // bool
  1005: 21, // int2
  1007: 23, // int4
  1016: 20, // int8
  1021: 700, // float4
  1022: 701, // float8
  1231: 1700, // numeric
  199: 114, // json
  3807: 3802, // jsonb
  1009: 25, // text
  1015: 1043, // varchar
  1014: 1042, // bpchar
  1115: 1114, // timestamp
  1185: 1184, // timestamptz
  1182: 1082, // date
  2951: 2950, // uuid
};

/** An error answered to the client with its HTTP status and JSON body. */
class HttpError extends Error {
  constructor(status, body) {
    super(body.message);
    this.status = status;
    this.body = body;
  }
}

const badRequest = (message) => new HttpError(400, { message, code: '' });

/** A JSON parameter as Postgres text, the way Neon converts it. */
function paramText(value) {
  if (value === null || value === undefined) {
    return null;
  }
  if (typeof value === 'string') {
    return value;
  }
  if (Array.isArray(value)) {
    return arrayLiteral(value);
  }
  return JSON.stringify(value);
}

function arrayLiteral(value) {
  if (value === null) {
    return 'NULL';
  }
  if (Array.isArray(value)) {
    return `{${value.map(arrayLiteral).join(',')}}`;
  }
  // Inside an array literal strings (and objects, as JSON text) are quoted and escaped.
  const text = typeof value === 'object' ? JSON.stringify(value) : String(value);
  return typeof value === 'string' || typeof value === 'object' ? JSON.stringify(text) : text;
}

/** Postgres text as JSON, for clients that do not ask for raw text. */
function textToJson(text, oid) {
  const element = ARRAY_ELEMENT[oid];
  if (element !== undefined) {
    return parseArray(text, element);
  }
  switch (oid) {
    case 16:
      return text === 't';
    case 21:
    case 23:
      return Number.parseInt(text, 10);
    case 700:
    case 701: {
      const n = Number(text);
      // NaN and the infinities stay strings, as JSON has no numbers for them.
      return Number.isFinite(n) ? n : text;
    }
    case 114:
    case 3802:
      return JSON.parse(text);
    default:
      return text;
  }
}

/** Parses an array's text form (`{1,2,NULL}`, `{{"a b",c}}`, `[0:1]={...}`). */
function parseArray(text, elementOid) {
  let i = text.startsWith('[') ? text.indexOf('=') + 1 : 0;
  const parse = () => {
    const out = [];
    i++; // '{'
    if (text[i] === '}') {
      i++;
      return out;
    }
    for (;;) {
      if (text[i] === '{') {
        out.push(parse());
      } else if (text[i] === '"') {
        let s = '';
        for (i++; text[i] !== '"'; i++) {
          if (text[i] === '\\') {
            i++;
          }
          s += text[i];
        }
        i++;
        out.push(textToJson(s, elementOid));
      } else {
        const end = text.slice(i).search(/[,}]/) + i;
        const item = text.slice(i, end).trim();
        out.push(item === 'NULL' ? null : textToJson(item, elementOid));
        i = end;
      }
      if (text[i] === ',') {
        i++;
        continue;
      }
      i++; // '}'
      return out;
    }
  };
  return parse();
}

function resultJson(result, { arrayMode, rawText }) {
  const fields = result.fields.map((f) => ({
    name: f.name,
    dataTypeID: f.dataTypeID,
    tableID: f.tableID,
    columnID: f.columnID,
    dataTypeSize: f.dataTypeSize,
    dataTypeModifier: f.dataTypeModifier,
    format: 'text',
  }));
  const value = rawText ? (v) => v : (v, i) => (v === null ? null : textToJson(v, fields[i].dataTypeID));
  const rows = result.rows.map((row) => {
    if (arrayMode) {
      return row.map(value);
    }
    const out = {};
    row.forEach((v, i) => {
      out[fields[i].name] = value(v, i);
    });
    return out;
  });
  return { command: result.command ?? '', rowCount: result.rowCount ?? null, rows, fields, rowAsArray: arrayMode };
}

/** A Postgres error (from the server) as Neon answers it; anything else is the bridge's own 5xx. */
function errorResponse(error) {
  if (error instanceof HttpError) {
    return error;
  }
  if (error instanceof pg.DatabaseError) {
    const body = { message: error.message };
    for (const key of ERROR_FIELDS) {
      body[key] = error[key] ?? null;
    }
    return new HttpError(400, body);
  }
  return new HttpError(500, { message: `Postgres is unreachable: ${error instanceof Error ? error.message : String(error)}`, code: '' });
}

function header(req, name) {
  const v = req.headers[name.toLowerCase()];
  return Array.isArray(v) ? v[0] : v;
}

/** The whole body; past the limit it is drained and refused, so the answer still reaches the client. */
function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (chunk) => {
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

function parsePayload(text) {
  let payload;
  try {
    payload = JSON.parse(text);
  } catch (error) {
    throw badRequest(`request body is not JSON: ${error.message}`);
  }
  const check = (q) => {
    if (!q || typeof q.query !== 'string') {
      throw badRequest('each query needs a "query" string');
    }
    if (q.params !== undefined && !Array.isArray(q.params)) {
      throw badRequest('"params" must be an array');
    }
    return {
      query: q.query,
      params: (q.params ?? []).map(paramText),
      arrayMode: typeof q.arrayMode === 'boolean' ? q.arrayMode : undefined,
    };
  };
  if (payload && Array.isArray(payload.queries)) {
    return { batch: payload.queries.map(check) };
  }
  return { single: check(payload) };
}

/** Ends a pool and waits until its connections are closed (pool.end() resolves before that). */
async function endPool(pool) {
  let open = pool.totalCount;
  const closed = new Promise((resolve) => {
    if (open === 0) {
      resolve(undefined);
    }
    pool.on('remove', () => {
      if (--open === 0) {
        resolve(undefined);
      }
    });
  });
  await pool.end().catch(() => {});
  await closed;
}

/**
 * The `/sql` handler. Only servers in `allow` ("host:port") are reachable.
 * @param {{ allow: Iterable<string> }} options
 * @returns {{ handle(req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse): Promise<void>, close(): Promise<void> }}
 */
export function sqlOverHttp({ allow }) {
  const allowed = new Set(allow);
  /** Warm pools by connection string. */
  const pools = new Map();

  function poolFor(connectionString) {
    let pool = pools.get(connectionString);
    if (pool) {
      return pool;
    }
    let url;
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
    pools.set(connectionString, pool);
    return pool;
  }

  const run = (client, q, rawText, defaultArrayMode) =>
    client
      .query({ text: q.query, values: q.params, rowMode: 'array', types: RAW_TEXT, queryMode: 'extended' })
      .then((result) => resultJson(result, { arrayMode: q.arrayMode ?? defaultArrayMode, rawText }));

  async function answer(req, timing) {
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
    let broken;
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
        const results = [];
        for (const q of payload.batch) {
          results.push(await run(client, q, rawText, arrayMode));
        }
        await client.query('COMMIT');
        const headers = {};
        if (isolation) {
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
        await client.query('ROLLBACK').catch((rollbackError) => {
          broken = rollbackError;
        });
        throw error;
      }
    } catch (error) {
      // A failure that is not the server's answer leaves the connection in an unknown state.
      if (!(error instanceof pg.DatabaseError)) {
        broken = error;
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
      const timing = { waitMs: 0, queryMs: 0, statements: 0 };
      let status = 200;
      let body;
      let headers = {};
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
        requestChannel.publish({ ms: performance.now() - started, ...timing, status });
      }
    },
    async close() {
      const all = [...pools.values()];
      pools.clear();
      await Promise.all(all.map(endPool));
    },
  };
}
