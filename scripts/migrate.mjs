#!/usr/bin/env node
// `npm run db:migrate`: applies migrations/ to $DATABASE_URL (Neon or any Postgres).
import { applyMigrations } from './lib/migrate.mjs';

const url = process.env.DATABASE_URL;
if (!url) {
  console.error('db:migrate: DATABASE_URL is not set (e.g. postgres://user:pass@host/db?sslmode=require)');
  process.exit(1);
}
try {
  const { applied, total } = await applyMigrations(url);
  console.log(`db:migrate: ${applied} migration(s) applied, ${total} in all`);
} catch (error) {
  console.error(`db:migrate: failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
}
