// The whole Worker on this machine without `wrangler dev`: the deployable bundle (built by
// `wrangler deploy --dry-run`) run by Miniflare's API with the configuration of wrangler.toml
// (Durable Objects, Queues, rate limits, assets), in front of the local services: Postgres
// (embedded PGlite, or a fresh database on a real server), the Neon WebSocket bridge and,
// optionally, the Upstash REST bridge to a redis-server. About 3x the throughput of
// `wrangler dev` (one workerd process instead of two), so benchmarks and end-to-end tests
// use it. Everything it starts is stopped by close().
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Log, LogLevel, Miniflare } from 'miniflare';
import { unstable_getMiniflareWorkerOptions } from 'wrangler';
import { startTestServices } from './test-services.mjs';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** KEY="value" lines of a .dev.vars file. */
async function readVars(file) {
  const vars = {};
  for (const line of (await readFile(file, 'utf8')).split('\n')) {
    const m = line.match(/^\s*([A-Za-z0-9_]+)\s*=\s*"?(.*?)"?\s*$/);
    if (m) {
      vars[m[1]] = m[2];
    }
  }
  return vars;
}

/**
 * Builds the Worker bundle as `wrangler deploy` would, without uploading.
 * @param {{ outdir?: string, env?: string }} options
 * @returns {Promise<{ dir: string, scriptPath: string, remove(): Promise<void> }>}
 */
export async function buildBundle({ outdir, env } = {}) {
  const dir = outdir ?? (await mkdtemp(join(tmpdir(), 'edge-seckill-bundle-')));
  const args = [join(root, 'node_modules/wrangler/bin/wrangler.js'), 'deploy', '--dry-run', '--outdir', dir];
  if (env) {
    args.push('--env', env);
  }
  await promisify(execFile)(process.execPath, args, { cwd: root, env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } });
  return {
    dir,
    scriptPath: join(dir, 'index.js'),
    async remove() {
      if (!outdir) {
        await rm(dir, { recursive: true, force: true });
      }
    },
  };
}

/**
 * Starts the services and the Worker.
 *
 * @param {{
 *   databaseUrl?: string,   // a Postgres server: a fresh database is created (and dropped by close); embedded PGlite when absent
 *   redisUrl?: string,      // a redis-server for the mirror (through the REST bridge); mirror off when absent
 *   bundle?: { dir: string, scriptPath: string }, // reuse a built bundle (see buildBundle)
 *   port?: number,          // 0 (default) picks a free port
 *   host?: string,
 *   bindings?: Record<string, string>, // overrides for vars and secrets (defaults: .dev.vars.example, DEV_MODE=true)
 *   logLevel?: number,      // a miniflare LogLevel; WARN by default
 *   log?: Log,              // a miniflare Log (or subclass) to receive the runtime's lines; overrides logLevel
 *   configure?: (options: object) => object, // last say over the Miniflare options (e.g. drop a queue consumer)
 * }} options
 * @returns {Promise<{ url: string, adminToken: string, mf: Miniflare, services: Awaited<ReturnType<typeof startTestServices>>,
 *   dispatchScheduled(cron?: string): Promise<void>, close(): Promise<void> }>}
 */
export async function startWorkerStack(options = {}) {
  const closers = [];
  const closeAll = async () => {
    for (const close of closers.reverse()) {
      await close().catch(() => {});
    }
  };
  try {
    const services = await startTestServices({ databaseUrl: options.databaseUrl, redisUrl: options.redisUrl });
    closers.push(() => services.close());
    let bundle = options.bundle;
    if (!bundle) {
      const built = await buildBundle();
      closers.push(() => built.remove());
      bundle = built;
    }
    const { workerOptions } = unstable_getMiniflareWorkerOptions(join(root, 'wrangler.toml'));
    const bindings = {
      ...workerOptions.bindings,
      ...(await readVars(join(root, '.dev.vars.example'))),
      DEV_MODE: 'true',
      DATABASE_URL: services.databaseUrl,
      PG_WS_PROXY: services.pgWsProxy,
      UPSTASH_REDIS_REST_URL: services.redisRestUrl ?? '',
      UPSTASH_REDIS_REST_TOKEN: services.redisRestToken ?? '',
      ...options.bindings,
    };
    const configure = options.configure ?? ((o) => o);
    const mf = new Miniflare(
      configure({
        ...workerOptions,
        bindings,
        modules: true,
        modulesRules: undefined,
        scriptPath: bundle.scriptPath,
        modulesRoot: bundle.dir,
        host: options.host ?? '127.0.0.1',
        port: options.port ?? 0,
        cf: false,
        unsafeTriggerHandlers: true,
        log: options.log ?? new Log(options.logLevel ?? LogLevel.WARN),
      }),
    );
    closers.push(() => mf.dispose());
    const url = (await mf.ready).toString().replace(/\/$/, '');
    return {
      url,
      adminToken: bindings.ADMIN_TOKEN,
      mf,
      services,
      /** Runs the Worker's scheduled handler once (what a cron trigger does). */
      async dispatchScheduled(cron = '* * * * *') {
        const worker = await mf.getWorker();
        await worker.scheduled({ cron, scheduledTime: new Date() });
      },
      close: closeAll,
    };
  } catch (error) {
    await closeAll();
    throw error;
  }
}
