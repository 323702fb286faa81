import type { TestProject } from 'vitest/node';
import { startTestServices, type TestServices } from '../../scripts/lib/test-services.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    /** What the Worker test files bind: the shared database's under '', and each of OWN_DATABASE_FILES' own by name. */
    workerServices: Record<string, WorkerServices>;
    /** Postgres URL as Node sees it, for assertions made outside the Worker. */
    nodeDatabaseUrl: string;
  }
}

/** What a Worker test project binds: its Postgres, the bridge to it, and the Redis bridge (or ''). */
export type WorkerServices = {
  databaseUrl: string;
  /** A database the bridge serves that takes every connection and never answers (TEST_SILENT_DATABASE_URL). */
  silentDatabaseUrl: string;
  pgWsProxy: string;
  redisRestUrl: string;
  redisRestToken: string;
};

/**
 * The Worker test files that act on the whole database, not only on goods of their own: the
 * crons (the overdue sweep and the reconciliation run over every goods, at clocks hours ahead),
 * the shop's one webhook endpoint (which the outage test of the routes sets and removes too), the
 * dead-letter lists and re-drives, the admin routes fed hostile input, the count of every
 * Postgres session the bridge opened, and the metrics scrape's gauges (they cover every goods on
 * sale, and a file's first scrape on the shared database woke an object for each of the run's
 * hundreds: 10-14 s a scrape late in a run). Each has a database of its own, whose goods ids start a
 * million times its place in this list after the run's first (they share the redis-server), so
 * they run beside the other files.
 */
export const OWN_DATABASE_FILES = [
  'config-entry',
  'dead-letters-redrive',
  'dependency-outage',
  'hostile-input',
  'lifecycle-mixed',
  'lifecycle-orders',
  'metrics-endpoint',
  'orders-guard',
  'outbox-resend',
  'reconcile-repair',
  'sale-rules-mixed',
  'webhooks',
];

/**
 * Starts what the Worker under test talks to: Postgres (embedded PGlite, or a fresh database
 * on the server named by TEST_DATABASE_URL), the WebSocket bridge the Neon driver needs, and,
 * when TEST_REDIS_URL is set, the Upstash REST bridge to that redis-server.
 */
export default async function setup(project: TestProject) {
  const start = (goodsIdsFrom?: number, from?: Blob) =>
    startTestServices({ databaseUrl: process.env.TEST_DATABASE_URL, redisUrl: process.env.TEST_REDIS_URL, goodsIdsFrom, from });
  // The redis-server outlives the run, and the mirror's keys are named by goods id: a run on it
  // numbers its goods from a place of its own, or a goods would find the keys an earlier run left.
  const base = process.env.TEST_REDIS_URL ? (1 + Math.floor(Math.random() * 90_000)) * 10_000_000 : 0;
  const services = await start(base || undefined);
  // An embedded database starts from the first one's migrated files, in a quarter of the time.
  const migrated = await services.snapshot?.();
  const own = await Promise.all(OWN_DATABASE_FILES.map((_, i) => start(base + (i + 1) * 1_000_000, migrated)));
  const bound = (s: TestServices): WorkerServices => ({
    databaseUrl: s.databaseUrl,
    silentDatabaseUrl: s.silentDatabaseUrl,
    pgWsProxy: s.pgWsProxy,
    redisRestUrl: s.redisRestUrl ?? '',
    redisRestToken: s.redisRestToken ?? '',
  });
  project.provide('workerServices', {
    '': bound(services),
    ...Object.fromEntries(OWN_DATABASE_FILES.map((name, i) => [name, bound(own[i] as TestServices)])),
  });
  project.provide('nodeDatabaseUrl', services.databaseUrl);
  return () => Promise.all([services, ...own].map((s) => s.close()));
}
