import { NeonDbError, type NeonQueryFunction, neon, neonConfig, Pool } from '@neondatabase/serverless';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import ws from 'ws';
import { freePort as closedPort } from '../../scripts/lib/free-port.ts';
import { startTestServices } from '../../scripts/lib/test-services.ts';
import { startWsBridge } from '../../scripts/lib/ws-bridge.ts';

const SERVER_URL = process.env.TEST_DATABASE_URL;
if (!SERVER_URL) {
  console.warn(
    'sql-http-bridge.integration: the real-PostgreSQL half is skipped, set TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres to run it',
  );
}

type Services = Awaited<ReturnType<typeof startTestServices>>;

/** The Neon driver pointed at this bridge, as db/client.ts points it. */
function useBridge(services: Services): void {
  neonConfig.fetchEndpoint = `http://${services.pgWsProxy}/sql`;
  neonConfig.wsProxy = (host, port) => `${services.pgWsProxy}/v1?address=${host}:${port}`;
  neonConfig.useSecureWebSocket = false;
  neonConfig.pipelineTLS = false;
  neonConfig.pipelineConnect = false;
  neonConfig.webSocketConstructor = ws;
}

/** A request the driver would not make, with the headers it always sends. */
async function post(services: Services, body: string, headers: Record<string, string> = {}, method = 'POST') {
  const res = await fetch(`http://${services.pgWsProxy}/sql`, {
    method,
    headers: {
      'Neon-Connection-String': services.databaseUrl,
      'Neon-Raw-Text-Output': 'true',
      'Neon-Array-Mode': 'true',
      ...headers,
    },
    ...(method === 'POST' ? { body } : {}),
  });
  return { status: res.status, type: res.headers.get('content-type'), json: (await res.json()) as Record<string, unknown> };
}

async function rejection(promise: Promise<unknown>): Promise<NeonDbError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(NeonDbError);
    return error as NeonDbError;
  }
  throw new Error('expected the query to fail');
}

function bridgeSuite(label: string, start: () => Promise<Services>, real: boolean) {
  describe(`SQL over HTTP on ${label}`, () => {
    let services: Services;
    let sql: NeonQueryFunction<false, false>;
    beforeAll(async () => {
      services = await start();
      useBridge(services);
      sql = neon(services.databaseUrl);
      await sql`CREATE TABLE bridge_item (id int PRIMARY KEY, name text NOT NULL CONSTRAINT bridge_item_name_len CHECK (length(name) < 20))`;
    });
    afterAll(async () => {
      await services?.close();
    });

    it('answers rows by field name, with values the driver parses by type OID', async () => {
      const [row] = await sql`SELECT 1::int4 AS i, 9007199254740993::int8 AS big, true AS b, 1.5::float8 AS f,
        12.30::numeric(6, 2) AS n, '{"a": [1, 2]}'::jsonb AS j, '2026-01-02T03:04:05.678Z'::timestamptz AS t,
        ARRAY[1, 2, NULL]::int4[] AS ia, ARRAY['a b', 'c"d', NULL]::text[] AS ta, '\\x0102'::bytea AS raw, NULL::text AS nothing`;
      expect(row).toEqual({
        i: 1,
        big: '9007199254740993',
        b: true,
        f: 1.5,
        n: '12.30',
        j: { a: [1, 2] },
        t: new Date('2026-01-02T03:04:05.678Z'),
        ia: [1, 2, null],
        ta: ['a b', 'c"d', null],
        raw: Buffer.from([1, 2]),
        nothing: null,
      });
    });

    it('gives full results as Neon does: fields with type OIDs, command and row count, rows as arrays', async () => {
      const full = neon(services.databaseUrl, { fullResults: true, arrayMode: true });
      const result = await full`SELECT 7::int4 AS seven, 'x'::text AS letter FROM generate_series(1, 3)`;
      expect(result.command).toBe('SELECT');
      expect(result.rowCount).toBe(3);
      expect(result.rows).toEqual([
        [7, 'x'],
        [7, 'x'],
        [7, 'x'],
      ]);
      expect(result.fields.map((f) => [f.name, f.dataTypeID, f.format])).toEqual([
        ['seven', 23, 'text'],
        ['letter', 25, 'text'],
      ]);
      const insert = await full`INSERT INTO bridge_item VALUES (1, 'one'), (2, 'two') RETURNING id`;
      expect([insert.command, insert.rowCount, insert.rows]).toEqual(['INSERT', 2, [[1], [2]]]);
      const ddl = await full`CREATE TEMP TABLE bridge_scratch (x int)`;
      expect([ddl.command, ddl.rowCount]).toEqual(['CREATE', null]);
    });

    it('passes parameters through as the driver encodes them', async () => {
      const at = new Date('2026-03-04T05:06:07.089Z');
      const [row] = await sql`SELECT ${'it\'s "quoted"'}::text AS s, ${42}::int AS n, ${true}::bool AS b, ${null}::text AS z,
        ${at}::timestamptz AS d, ${[1, 2, 3]}::int[] AS a, ${['x,y', 'NULL', null]}::text[] AS ta, ${{ k: ['v'] }}::jsonb AS o,
        ${Buffer.from([0, 255])}::bytea AS raw`;
      expect(row).toEqual({
        s: 'it\'s "quoted"',
        n: 42,
        b: true,
        z: null,
        d: at,
        a: [1, 2, 3],
        ta: ['x,y', 'NULL', null],
        o: { k: ['v'] },
        raw: Buffer.from([0, 255]),
      });
    });

    it('turns a Postgres error into a NeonDbError with its fields and code', async () => {
      const syntax = await rejection(sql`SELEC 1`);
      expect(syntax).toMatchObject({ code: '42601', severity: 'ERROR', position: '1' });
      expect(syntax.message).toMatch(/syntax error/);

      await sql`INSERT INTO bridge_item VALUES (10, 'ten')`;
      const duplicate = await rejection(sql`INSERT INTO bridge_item VALUES (10, 'again')`);
      expect(duplicate).toMatchObject({ code: '23505', table: 'bridge_item', schema: 'public', constraint: 'bridge_item_pkey' });
      expect(duplicate.detail).toMatch(/\(id\)=\(10\)/);

      const check = await rejection(sql`INSERT INTO bridge_item VALUES (11, ${'x'.repeat(30)})`);
      expect(check).toMatchObject({ code: '23514', constraint: 'bridge_item_name_len' });

      const raised = await rejection(
        sql`DO $$ BEGIN RAISE EXCEPTION 'boom' USING ERRCODE = 'P0001', DETAIL = 'the detail', HINT = 'the hint'; END $$`,
      );
      expect(raised).toMatchObject({ message: 'boom', code: 'P0001', detail: 'the detail', hint: 'the hint' });
      expect(raised.where).toMatch(/PL\/pgSQL/);
    });

    it('runs one statement per query, as Neon does', async () => {
      const error = await rejection(sql.query('SELECT 1; SELECT 2'));
      expect(error.code).toBe('42601');
    });

    it('runs a batch as one transaction: all of it or none of it', async () => {
      await sql.transaction([sql`INSERT INTO bridge_item VALUES (20, 'a')`, sql`INSERT INTO bridge_item VALUES (21, 'b')`]);
      const failed = await rejection(
        sql.transaction([sql`INSERT INTO bridge_item VALUES (22, 'c')`, sql`INSERT INTO bridge_item VALUES (20, 'dup')`]),
      );
      expect(failed.code).toBe('23505');
      const rows = await sql`SELECT id FROM bridge_item WHERE id BETWEEN 20 AND 29 ORDER BY id`;
      expect(rows.map((r) => r.id)).toEqual([20, 21]);

      const [[level] = []] = await sql.transaction([sql`SHOW transaction_isolation`], { isolationLevel: 'Serializable' });
      expect(level?.transaction_isolation).toBe('serializable');
      const readOnly = await rejection(sql.transaction([sql`INSERT INTO bridge_item VALUES (23, 'x')`], { readOnly: true }));
      expect(readOnly.code).toBe('25006');
    });

    it('does not let a statement that opened a transaction leak it into the next request', async () => {
      await sql`BEGIN`;
      const [a] = await sql`SELECT now()::text AS t`;
      await new Promise((r) => setTimeout(r, 20));
      const [b] = await sql`SELECT now()::text AS t`;
      // Inside a leaked transaction now() would stand still.
      expect(a?.t).not.toBe(b?.t);
    });

    it('answers bad requests with 4xx and a JSON message', async () => {
      const noConnection = await post(services, '{"query":"SELECT 1"}', { 'Neon-Connection-String': '' });
      expect(noConnection.status).toBe(400);
      expect(noConnection.type).toBe('application/json');
      expect(noConnection.json.message).toMatch(/Neon-Connection-String/);

      const elsewhere = await post(services, '{"query":"SELECT 1"}', { 'Neon-Connection-String': 'postgres://u:p@db.example.com:5432/x' });
      expect(elsewhere.status).toBe(400);
      expect(elsewhere.json.message).toMatch(/db\.example\.com:5432/);

      expect((await post(services, '{"query":')).status).toBe(400);
      expect((await post(services, '{"params":[]}')).status).toBe(400);
      expect((await post(services, '{"queries":[{"query":"SELECT 1"}]}', { 'Neon-Batch-Isolation-Level': 'Chaos' })).status).toBe(400);
      expect((await post(services, '', {}, 'GET')).status).toBe(405);
      const notFound = await fetch(`http://${services.pgWsProxy}/nowhere`);
      expect(notFound.status).toBe(404);
      await notFound.body?.cancel();
    });

    it('keeps the WebSocket door open on the same port, with interactive transactions', async () => {
      const pool = new Pool({ connectionString: services.databaseUrl, max: 1 });
      try {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          await client.query(`INSERT INTO bridge_item VALUES (30, 'ws')`);
          await client.query('ROLLBACK');
        } finally {
          client.release();
        }
        const { rows } = await pool.query('SELECT count(*)::int AS n FROM bridge_item WHERE id = 30');
        expect(rows[0]?.n).toBe(0);
      } finally {
        await pool.end();
      }
    });

    it.skipIf(!real)('keeps its connection warm between requests', async () => {
      const [a] = await sql`SELECT pg_backend_pid() AS pid`;
      const [b] = await sql`SELECT pg_backend_pid() AS pid`;
      expect(a?.pid).toBe(b?.pid);
    });

    it.skipIf(!real)('passes on a connection refused by the server as a Postgres error', async () => {
      const url = new URL(services.databaseUrl);
      url.pathname = '/edge_seckill_no_such_database';
      const error = await rejection(neon(url.toString())`SELECT 1`);
      expect(error.code).toBe('3D000');
    });
  });
}

describe('embedded PostgreSQL (PGlite)', () => {
  bridgeSuite('PGlite', () => startTestServices(), false);
});

describe.skipIf(!SERVER_URL)('real PostgreSQL (TEST_DATABASE_URL)', () => {
  bridgeSuite('a fresh database', () => startTestServices({ databaseUrl: SERVER_URL }), true);

  it('ends its warm connections when the bridge closes', async () => {
    const services = await startTestServices({ databaseUrl: SERVER_URL });
    try {
      const database = new URL(services.databaseUrl).pathname.slice(1);
      const target = new URL(services.databaseUrl);
      const bridge = await startWsBridge({ allow: [`${target.hostname}:${target.port || 5432}`] });
      neonConfig.fetchEndpoint = bridge.sqlEndpoint;
      await Promise.all([1, 2, 3].map(() => neon(services.databaseUrl)`SELECT pg_sleep(0.05)`));
      const open = async () => {
        const c = new pg.Client({ connectionString: SERVER_URL });
        await c.connect();
        try {
          const { rows } = await c.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1', [database]);
          return rows[0]?.n ?? -1;
        } finally {
          await c.end();
        }
      };
      expect(await open()).toBeGreaterThanOrEqual(1);
      await bridge.close();
      for (let i = 0; i < 50 && (await open()) > 0; i++) {
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(await open()).toBe(0);
    } finally {
      await services.close();
    }
  });

  // The bridge's pooled connections when the server ends them (a restart, a failover, an
  // operator's pg_terminate_backend): Postgres sends each backend a FATAL 57P01 and closes it. A
  // connection the bridge had checked out with no statement running emitted that as an 'error'
  // event nobody heard, and the whole process (the chaos tool; the dev stack on a real server)
  // died: 372 uncaught errors in this test's four seconds on the code before.
  it('keeps answering while every one of its connections is terminated again and again', async () => {
    const services = await startTestServices({ databaseUrl: SERVER_URL });
    const admin = new pg.Client({ connectionString: SERVER_URL });
    admin.on('error', () => {});
    await admin.connect();
    const crashes: unknown[] = [];
    const onUncaught = (error: unknown) => crashes.push(error);
    process.on('uncaughtException', onUncaught);
    try {
      neonConfig.fetchEndpoint = `http://${services.pgWsProxy}/sql`;
      const sql = neon(services.databaseUrl);
      const database = new URL(services.databaseUrl).pathname.slice(1);
      const until = Date.now() + 4_000;
      let answered = 0;
      let failed = 0;
      const shoppers = Array.from({ length: 8 }, async () => {
        while (Date.now() < until) {
          await sql`SELECT 1 AS one`.then(
            () => answered++,
            () => failed++,
          );
        }
      });
      const ended = new Set<number>();
      const terminator = (async () => {
        while (Date.now() < until) {
          const { rows } = await admin.query<{ pid: number; signalled: boolean }>(
            'SELECT pid, pg_terminate_backend(pid) AS signalled FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
            [database],
          );
          for (const { pid, signalled } of rows) {
            if (signalled) {
              ended.add(pid);
            }
          }
          await new Promise((r) => setTimeout(r, 5));
        }
      })();
      await Promise.all([...shoppers, terminator]);
      expect(crashes).toEqual([]);
      expect(answered).toBeGreaterThan(0);
      expect(ended.size).toBeGreaterThan(0);
      // The storm is over once the last backends it ended have exited: pg_terminate_backend only
      // signals them, and a backend that sent its FATAL may still be going when the call returns.
      // A query whose connection was ended under it may fail; after that, every one answers.
      const going = async () =>
        (await admin.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ANY($1::int[])', [[...ended]]))
          .rows[0]?.n;
      for (let i = 0; i < 100 && (await going()) !== 0; i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      expect(await going()).toBe(0);
      const after = await Promise.all(Array.from({ length: 8 }, () => sql`SELECT 2 AS two`));
      expect(after.map((rows) => rows[0]?.two)).toEqual(Array(8).fill(2));
      console.info(`terminate storm: ${answered} answered, ${failed} failed while their connections were ended`);
    } finally {
      process.off('uncaughtException', onUncaught);
      await admin.end();
      await services.close();
    }
  });
});

describe('Postgres down', () => {
  it('answers 5xx, which the driver reports as a server error', async () => {
    const port = await closedPort();
    const bridge = await startWsBridge({ allow: [`127.0.0.1:${port}`] });
    try {
      neonConfig.fetchEndpoint = bridge.sqlEndpoint;
      const error = await rejection(neon(`postgres://postgres@127.0.0.1:${port}/shop`)`SELECT 1`);
      expect(error.message).toMatch(/HTTP status 500/);
      expect(error.message).toMatch(/ECONNREFUSED/);
    } finally {
      await bridge.close();
    }
  });
});
