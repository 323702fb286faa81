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
import { Log, LogLevel, Miniflare, type MiniflareOptions } from 'miniflare';
import { unstable_getMiniflareWorkerOptions } from 'wrangler';
import { startServicesProcess } from './services-process.ts';
import { startTestServices, type TestServices } from './test-services.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** KEY="value" lines of a .dev.vars file. */
async function readVars(file: string): Promise<Record<string, string>> {
  const vars: Record<string, string> = {};
  for (const line of (await readFile(file, 'utf8')).split('\n')) {
    const m = line.match(/^\s*([A-Za-z0-9_]+)\s*=\s*"?(.*?)"?\s*$/);
    if (m?.[1]) {
      vars[m[1]] = m[2] ?? '';
    }
  }
  return vars;
}

/** A built Worker bundle (see buildBundle). */
export type Bundle = { dir: string; scriptPath: string };

export type WorkerStackOptions = {
  /** A Postgres server: a fresh database is created (and dropped by close); embedded PGlite when absent. */
  databaseUrl?: string | undefined;
  /** A redis-server for the mirror (through the REST bridge); mirror off when absent. */
  redisUrl?: string | undefined;
  /** Run Postgres and the bridges in a child process (services-process.ts), off this process' event loop. */
  servicesProcess?: boolean;
  /** Reuse a built bundle (see buildBundle). */
  bundle?: Bundle;
  /** 0 (default) picks a free port. */
  port?: number;
  host?: string;
  /** Overrides for vars and secrets (defaults: .dev.vars.example, DEV_MODE=true). */
  bindings?: Record<string, string>;
  /** A miniflare LogLevel; WARN by default. */
  logLevel?: LogLevel;
  /** A miniflare Log (or subclass) to receive the runtime's lines; overrides logLevel. */
  log?: Log;
  /** Last say over the Miniflare options (e.g. drop a queue consumer). */
  configure?: (options: MiniflareOptions) => MiniflareOptions;
  /**
   * `url` reaches the Worker on a socket of its own instead of through Miniflare's entry
   * worker, the local stand-in for Cloudflare's front line (it sets CF-Connecting-IP and
   * `request.cf`, and costs workerd more CPU per request than a trivial route of the Worker
   * itself). Clients then send CF-Connecting-IP themselves, as Cloudflare's edge does.
   */
  direct?: boolean;
};

export type WorkerStack = {
  /** Where clients reach the Worker: Miniflare's entry worker, or its own socket when `direct`. */
  url: string;
  adminToken: string;
  mf: Miniflare;
  services: TestServices;
  /** Runs the Worker's scheduled handler once (what a cron trigger does). */
  dispatchScheduled(cron?: string): Promise<void>;
  close(): Promise<void>;
};

/** Builds the Worker bundle as `wrangler deploy` would, without uploading. */
export async function buildBundle({ outdir, env }: { outdir?: string; env?: string } = {}): Promise<Bundle & { remove(): Promise<void> }> {
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

/** Starts the services and the Worker. */
export async function startWorkerStack(options: WorkerStackOptions = {}): Promise<WorkerStack> {
  const closers: (() => Promise<void>)[] = [];
  const closeAll = async () => {
    for (const close of closers.reverse()) {
      await close().catch(() => {});
    }
  };
  try {
    const serviceOptions = { databaseUrl: options.databaseUrl, redisUrl: options.redisUrl };
    const services = options.servicesProcess ? await startServicesProcess(serviceOptions) : await startTestServices(serviceOptions);
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
    const configure = options.configure ?? ((o: MiniflareOptions) => o);
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
        ...(options.direct ? { unsafeDirectSockets: [{ host: options.host ?? '127.0.0.1', port: 0 }] } : {}),
      }),
    );
    closers.push(() => mf.dispose());
    const entry = (await mf.ready).toString();
    const url = (options.direct ? (await mf.unsafeGetDirectURL()).toString() : entry).replace(/\/$/, '');
    return {
      url,
      adminToken: String(bindings.ADMIN_TOKEN ?? ''),
      mf,
      services,
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
