// Applies the drizzle-kit migrations in migrations/ to a Postgres URL. Idempotent: the
// applied ones are recorded in drizzle.__drizzle_migrations, so a second run is a no-op.
import { fileURLToPath } from 'node:url';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';

const migrationsFolder = fileURLToPath(new URL('../../migrations', import.meta.url));

/** Applies pending migrations; returns how many were pending before the run. */
export async function applyMigrations(databaseUrl: string): Promise<{ applied: number; total: number }> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const before = await countApplied(client);
    await migrate(drizzle(client), { migrationsFolder });
    const after = await countApplied(client);
    return { applied: after - before, total: after };
  } finally {
    await client.end();
  }
}

async function countApplied(client: pg.Client): Promise<number> {
  const exists = await client.query<{ t: string | null }>(`SELECT to_regclass('drizzle.__drizzle_migrations') AS t`);
  if (!exists.rows[0]?.t) {
    return 0;
  }
  const { rows } = await client.query<{ n: number }>('SELECT count(*)::int AS n FROM drizzle.__drizzle_migrations');
  return rows[0]?.n ?? 0;
}
