import type { TestProject } from 'vitest/node';
import { startTestServices } from '../../scripts/lib/test-services.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
    pgWsProxy: string;
    redisRestUrl: string;
    redisRestToken: string;
    /** Postgres URL as Node sees it, for assertions made outside the Worker. */
    nodeDatabaseUrl: string;
  }
}

/**
 * Starts what the Worker under test talks to: Postgres (embedded PGlite, or a fresh database
 * on the server named by TEST_DATABASE_URL), the WebSocket bridge the Neon driver needs, and,
 * when TEST_REDIS_URL is set, the Upstash REST bridge to that redis-server.
 */
export default async function setup(project: TestProject) {
  const services = await startTestServices({
    databaseUrl: process.env.TEST_DATABASE_URL,
    redisUrl: process.env.TEST_REDIS_URL,
  });
  project.provide('databaseUrl', services.databaseUrl);
  project.provide('nodeDatabaseUrl', services.databaseUrl);
  project.provide('pgWsProxy', services.pgWsProxy);
  project.provide('redisRestUrl', services.redisRestUrl ?? '');
  project.provide('redisRestToken', services.redisRestToken ?? '');
  return () => services.close();
}
