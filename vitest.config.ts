import { readFileSync } from 'node:fs';
import { cloudflareTest } from '@cloudflare/vitest-pool-workers';
import { defineConfig } from 'vitest/config';
import FailuresReporter from './test/setup/failures-reporter';
import LongestFirst from './test/setup/sequencer';
import { OWN_DATABASE_FILES, type WorkerServices } from './test/setup/services';

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

/** The Worker test files of functions and objects alone (no request to the Worker, no goods of the database). */
const UNIT_FILES = 'test/workers/**/*.unit.test.ts';

/** The Worker test files that act on the whole database, each on a database of its own (test/setup/services.ts). */
const WHOLE_DATABASE_FILES = OWN_DATABASE_FILES.map((name) => ({ name, file: `test/workers/${name}.integration.test.ts` }));

/**
 * The packages the Worker and its tests import, pre-bundled once: workerd otherwise loads zod,
 * hono and drizzle module by module for every test file (~2 s a file). Every bare import belongs
 * here: one left out would load a second copy of its package beside it.
 */
const WORKER_DEPS = [
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
];

/**
 * A project of Worker test files. Each file runs in a workerd of its own (its own objects and
 * their storage); what they share is the Postgres (and Redis) the global setup starts, or the
 * database of their own `ownDatabase` names. Four files run at once. With `shared`, the
 * project's files run one after another in the workerds its first ones started, each file's
 * modules loaded once (see the unit files' project below).
 */
function workersProject(
  name: string,
  files: { include: string[]; exclude?: string[] },
  { ownDatabase = '', shared = false }: { ownDatabase?: string; shared?: boolean } = {},
) {
  return {
    plugins: [
      cloudflareTest(({ inject }) => {
        const s = inject('workerServices')[ownDatabase] as WorkerServices;
        return {
          wrangler: { configPath: './wrangler.toml' },
          miniflare: {
            bindings: {
              ...devVars(),
              DATABASE_URL: s.databaseUrl,
              TEST_SILENT_DATABASE_URL: s.silentDatabaseUrl,
              PG_WS_PROXY: s.pgWsProxy,
              UPSTASH_REDIS_REST_URL: s.redisRestUrl,
              UPSTASH_REDIS_REST_TOKEN: s.redisRestToken,
            },
          },
        };
      }),
    ],
    test: {
      name,
      ...files,
      testTimeout: 60_000,
      hookTimeout: 60_000,
      maxWorkers: 4,
      isolate: !shared,
      sequence: { groupOrder: 1 },
      deps: { optimizer: { ssr: { enabled: true, include: WORKER_DEPS } } },
    },
  };
}

export default defineConfig({
  test: {
    // Once for the whole run: what the Worker tests talk to (the projects inherit what it provides).
    globalSetup: ['./test/setup/services.ts'],
    // Each group's longest files first, on a fresh clone too (test/setup/sequencer.ts).
    sequence: { sequencer: LongestFirst },
    // With VITEST_JSON (CI), a JSON report and, beside it, the failures it names no reason for.
    reporters: process.env.VITEST_JSON
      ? [
          'default',
          ['json', { outputFile: process.env.VITEST_JSON }],
          new FailuresReporter(process.env.VITEST_JSON.replace(/\.json$/, '.failures.txt')),
        ]
      : ['default'],
    projects: [
      // Four files at a time: each goods a file makes is its own, and nothing else they share
      // changes under them. Most of a file's time is waiting on a queue batch, an alarm or a
      // retry, so three kept two cores busier than two (a run: 399 s against 493 s), and four
      // than three (the Worker files: 266 s at 159% of the two cores, against 296 s at 142%).
      // The files that act on the whole database run among them, each on its own database (they
      // ran one at a time after the others, about 130 s).
      workersProject('workers', {
        include: ['test/workers/**/*.test.ts'],
        exclude: [...WHOLE_DATABASE_FILES.map((f) => f.file), UNIT_FILES],
      }),
      ...WHOLE_DATABASE_FILES.map(({ name, file }) => workersProject(`own-db:${name}`, { include: [file] }, { ownDatabase: name })),
      // The unit files (functions and objects driven by hand, no goods of the database, no Worker
      // request): in shared workerds, where each of them had cost a workerd's start and a load of
      // the test runner's modules (about 6 s of a slot against their 1 s of tests). They keep no
      // state a next file could see; alone: 73 s in workerds of their own, 29 s shared.
      workersProject('workers-unit', { include: [UNIT_FILES] }, { shared: true }),
      {
        test: {
          name: 'node',
          include: ['test/node/**/*.test.ts'],
          environment: 'node',
          testTimeout: 120_000,
          hookTimeout: 120_000,
          // Three files at a time: each starts what it needs on free ports, with a database (and a
          // Redis database) of its own, and most of their time is spent waiting on a stack or a page.
          maxWorkers: 3,
          sequence: { groupOrder: 0 },
        },
      },
    ],
  },
});
