import { readFileSync } from 'node:fs';
import { cloudflareTest } from '@cloudflare/vitest-pool-workers';
import { defineConfig } from 'vitest/config';

/** The committed local defaults (.dev.vars.example), so a fresh clone tests as it runs. */
function devVars(): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const line of readFileSync(new URL('./.dev.vars.example', import.meta.url), 'utf8').split('\n')) {
    const m = line.match(/^\s*([A-Z0-9_]+)\s*=\s*"?(.*?)"?\s*$/);
    if (m?.[1]) {
      vars[m[1]] = m[2] ?? '';
    }
  }
  return vars;
}

export default defineConfig({
  test: {
    reporters: process.env.VITEST_JSON ? ['default', ['json', { outputFile: process.env.VITEST_JSON }]] : ['default'],
    projects: [
      {
        plugins: [
          cloudflareTest(({ inject }) => ({
            wrangler: { configPath: './wrangler.toml' },
            miniflare: {
              bindings: {
                ...devVars(),
                DATABASE_URL: inject('databaseUrl'),
                PG_WS_PROXY: inject('pgWsProxy'),
                UPSTASH_REDIS_REST_URL: inject('redisRestUrl'),
                UPSTASH_REDIS_REST_TOKEN: inject('redisRestToken'),
              },
            },
          })),
        ],
        test: {
          name: 'workers',
          include: ['test/workers/**/*.test.ts'],
          globalSetup: ['./test/setup/services.ts'],
          testTimeout: 60_000,
          hookTimeout: 60_000,
          // One file at a time: the files share one Postgres and the runtime limits.
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
          // The packages the Worker and these tests import, pre-bundled once: workerd otherwise loads
          // zod, hono and drizzle module by module for every test file (~2 s a file). Every bare
          // import belongs here: one left out would load a second copy of its package beside it.
          deps: {
            optimizer: {
              ssr: {
                enabled: true,
                include: [
                  'zod',
                  'hono',
                  'hono/factory',
                  'hono/jwt',
                  'hono/utils/jwt/jws',
                  'hono/http-exception',
                  'hono/utils/jwt/types',
                  'hono/utils/jwt/jwt',
                  'hono/utils/http-status',
                  'hono/route',
                  'hono/body-limit',
                  'hono/router/reg-exp-router',
                  '@hono/zod-validator',
                  'drizzle-orm',
                  'drizzle-orm/pg-core',
                  'drizzle-orm/neon-serverless',
                  'drizzle-orm/neon-http',
                  '@neondatabase/serverless',
                  '@upstash/redis/cloudflare',
                  'fast-check',
                ],
              },
            },
          },
        },
      },
      {
        test: {
          name: 'node',
          include: ['test/node/**/*.test.ts'],
          environment: 'node',
          testTimeout: 120_000,
          hookTimeout: 120_000,
          // Two files at a time: each starts what it needs on free ports, with a database (and a
          // Redis database) of its own, and most of their time is spent waiting on a stack or a page.
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
    ],
  },
});
