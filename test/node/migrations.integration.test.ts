// `npm run db:migrate` on an empty PostgreSQL: every table and column of db/schema.ts
// exists afterwards, and a second run applies nothing. Runs against the embedded PGlite, and
// also against a fresh database on the server named by TEST_DATABASE_URL when it is set.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { is } from 'drizzle-orm';
import { getTableConfig, PgTable } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as schema from '../../db/schema';
import { startEmbeddedPostgres } from '../../scripts/lib/pg-embedded.ts';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const SERVER_URL = process.env.TEST_DATABASE_URL;
if (!SERVER_URL) {
  console.warn(
    'migrations.integration: the real-PostgreSQL half is skipped, set TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres to run it',
  );
}

const journal = JSON.parse(readFileSync(`${root}migrations/meta/_journal.json`, 'utf8')) as { entries: { tag: string }[] };
const exported: unknown[] = Object.values(schema);
const tables = exported
  .filter((v): v is PgTable => is(v, PgTable))
  .map((t) => {
    const c = getTableConfig(t);
    return { schema: c.schema ?? 'public', name: c.name, columns: c.columns.map((col) => col.name).sort() };
  });

/** `npm run db:migrate` as a user runs it (through npm, so the script wiring is tested too). */
async function dbMigrate(databaseUrl: string | undefined): Promise<{ code: number; out: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: databaseUrl ?? '' };
  if (databaseUrl === undefined) {
    delete env.DATABASE_URL;
  }
  try {
    const { stdout, stderr } = await run('npm', ['run', '--silent', 'db:migrate'], { cwd: root, env });
    return { code: 0, out: `${stdout}${stderr}` };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

async function query<T extends pg.QueryResultRow>(url: string, text: string, values: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(text, values)).rows;
  } finally {
    await client.end();
  }
}

function migrationSuite(label: string, database: () => { url: string }) {
  describe(`migrations on ${label}`, () => {
    it('apply cleanly to an empty database', async () => {
      const { url } = database();
      const before = await query<{ n: number }>(
        url,
        `SELECT count(*)::int AS n FROM information_schema.tables WHERE table_schema = 'public'`,
      );
      expect(before[0]?.n).toBe(0);
      const first = await dbMigrate(url);
      expect(first.code, first.out).toBe(0);
      expect(first.out).toContain(`${journal.entries.length} migration(s) applied, ${journal.entries.length} in all`);
    });

    it('create every table and column of db/schema.ts', async () => {
      const { url } = database();
      expect(tables.length).toBeGreaterThan(5);
      for (const t of tables) {
        const rows = await query<{ column_name: string }>(
          url,
          'SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2',
          [t.schema, t.name],
        );
        expect(rows.map((r) => r.column_name).sort(), `${t.schema}.${t.name}`).toEqual(t.columns);
      }
    });

    it('record each journal entry once', async () => {
      const { url } = database();
      const rows = await query<{ n: number }>(url, 'SELECT count(*)::int AS n FROM drizzle.__drizzle_migrations');
      expect(rows[0]?.n).toBe(journal.entries.length);
    });

    it('are a no-op the second time', async () => {
      const { url } = database();
      const second = await dbMigrate(url);
      expect(second.code, second.out).toBe(0);
      expect(second.out).toContain(`0 migration(s) applied, ${journal.entries.length} in all`);
      const rows = await query<{ n: number }>(url, 'SELECT count(*)::int AS n FROM drizzle.__drizzle_migrations');
      expect(rows[0]?.n).toBe(journal.entries.length);
    });
  });
}

describe('embedded PostgreSQL (PGlite)', () => {
  let embedded: Awaited<ReturnType<typeof startEmbeddedPostgres>>;
  beforeAll(async () => {
    embedded = await startEmbeddedPostgres();
  });
  afterAll(async () => {
    await embedded?.close();
  });
  migrationSuite('PGlite', () => embedded);
});

describe.skipIf(!SERVER_URL)('real PostgreSQL (TEST_DATABASE_URL)', () => {
  const name = `edge_seckill_migrations_${Date.now()}_${randomBytes(3).toString('hex')}`;
  let url = '';
  beforeAll(async () => {
    await query(SERVER_URL ?? '', `CREATE DATABASE ${name}`);
    const u = new URL(SERVER_URL ?? '');
    u.pathname = `/${name}`;
    url = u.toString();
  });
  afterAll(async () => {
    await query(SERVER_URL ?? '', `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  });
  migrationSuite('a fresh database', () => ({ url }));
});

describe('npm run db:migrate', () => {
  it('exits non-zero with a clear message when DATABASE_URL is not set', async () => {
    for (const value of [undefined, '']) {
      const { code, out } = await dbMigrate(value);
      expect(code).not.toBe(0);
      expect(out).toContain('DATABASE_URL is not set');
    }
  });

  it('exits non-zero, without printing the password, when the database is unreachable', async () => {
    const { code, out } = await dbMigrate('postgres://app:hunter2-secret@127.0.0.1:1/shop');
    expect(code).not.toBe(0);
    expect(out).toMatch(/failed: .*ECONNREFUSED/);
    expect(out).toContain('postgres://app:***@127.0.0.1:1/shop');
    expect(out).not.toContain('hunter2');
  });
});
