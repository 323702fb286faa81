#!/usr/bin/env tsx
// `npm run dev`: the whole system on embedded defaults.
//   Postgres: embedded PGlite (data in .data/pglite), or DATABASE_URL=postgres://... for a real one
//   Redis mirror: on when REDIS_URL is set or a redis-server answers on 127.0.0.1:6379, off otherwise
//   Then `wrangler dev` on PORT (default 8787), and the cron schedule fired once a minute as in
//   production (DEV_CRON=off to stop that). Ctrl-C stops everything this started.
//   PGLITE_DIR and DEV_PERSIST_DIR move the embedded database and wrangler's local state (Durable
//   Objects, queues) elsewhere, e.g. a throw-away directory for a second stack next to yours.
//   The devtools inspector listens on INSPECTOR_PORT, else 9229, else (9229 taken, say by a
//   stack next to this one) a free port: wrangler would otherwise stop at start.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { devCronNotice, devCronSettings, startDevCron } from './lib/dev-cron.ts';
import { freePort, isPortFree } from './lib/free-port.ts';
import { applyMigrations } from './lib/migrate.ts';
import { startEmbeddedPostgres } from './lib/pg-embedded.ts';
import { startRedisRestBridge } from './lib/redis-rest-bridge.ts';
import { startWsBridge } from './lib/ws-bridge.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const port = Number(process.env.PORT ?? 8787);
const closers: (() => Promise<void>)[] = [];
/** wrangler dev's own default. */
const DEFAULT_INSPECTOR_PORT = 9229;

function say(message: string): void {
  console.log(`[dev] ${message}`);
}

/** KEY="value" lines, as wrangler reads .dev.vars. */
function readVars(file: string): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const m = line.match(/^\s*([A-Za-z0-9_]+)\s*=\s*"?(.*?)"?\s*$/);
    if (m?.[1]) {
      vars[m[1]] = m[2] ?? '';
    }
  }
  return vars;
}

function redisAnswers(host: string, redisPort: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port: redisPort });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (d) => done(d.toString().startsWith('+PONG')));
  });
}

/** The devtools inspector's port: INSPECTOR_PORT, else 9229 while it is free, else any free port. */
async function inspectorPort(): Promise<number> {
  if (process.env.INSPECTOR_PORT) {
    return Number(process.env.INSPECTOR_PORT);
  }
  return (await isPortFree(DEFAULT_INSPECTOR_PORT)) ? DEFAULT_INSPECTOR_PORT : freePort();
}

async function shutdown(code: number): Promise<void> {
  for (const close of closers.reverse()) {
    await close().catch(() => {});
  }
  process.exit(code);
}

async function main(): Promise<void> {
  const url = `http://127.0.0.1:${port}`;
  const cron = devCronSettings(process.env);
  const varsFile = existsSync(`${root}.dev.vars`) ? `${root}.dev.vars` : `${root}.dev.vars.example`;
  const vars = readVars(varsFile);
  say(`settings from ${varsFile.slice(root.length)}`);
  say(devCronNotice(cron, url));

  let databaseUrl = process.env.DATABASE_URL;
  if (databaseUrl) {
    say(`Postgres: ${databaseUrl.replace(/\/\/[^@]*@/, '//***@')}`);
  } else {
    const dataDir = process.env.PGLITE_DIR || `${root}.data/pglite`;
    mkdirSync(dataDir, { recursive: true });
    const pg = await startEmbeddedPostgres({ dataDir });
    closers.push(() => pg.close());
    databaseUrl = pg.url;
    say(`Postgres: embedded PGlite at ${pg.url} (data in ${dataDir.startsWith(root) ? dataDir.slice(root.length) : dataDir})`);
  }
  const { applied, total } = await applyMigrations(databaseUrl);
  say(`migrations: ${applied} applied, ${total} in all`);

  const target = new URL(databaseUrl);
  const bridge = await startWsBridge({ allow: [`${target.hostname}:${target.port || 5432}`] });
  closers.push(() => bridge.close());

  const redisUrl = process.env.REDIS_URL ?? ((await redisAnswers('127.0.0.1', 6379)) ? 'redis://127.0.0.1:6379' : undefined);
  let redis = { url: '', token: '' };
  if (redisUrl) {
    const r = await startRedisRestBridge({ redisUrl, token: randomBytes(16).toString('hex') });
    closers.push(() => r.close());
    redis = { url: r.url, token: r.token };
    say(`Redis mirror: on (${redisUrl} through ${r.url})`);
  } else {
    say('Redis mirror: off (set REDIS_URL or start redis-server on 127.0.0.1:6379)');
  }

  const merged = {
    ...vars,
    // wrangler.toml sets no ENVIRONMENT (unset is production); a .dev.vars copied before it moved there may lack it.
    ENVIRONMENT: vars.ENVIRONMENT || 'development',
    DATABASE_URL: databaseUrl,
    PG_WS_PROXY: bridge.proxy,
    UPSTASH_REDIS_REST_URL: redis.url,
    UPSTASH_REDIS_REST_TOKEN: redis.token,
  };
  mkdirSync(`${root}.wrangler`, { recursive: true });
  // One file per port, so two stacks side by side never read each other's settings.
  const envFile = `${root}.wrangler/dev.vars.${port}.generated`;
  closers.push(async () => rmSync(envFile, { force: true }));
  writeFileSync(
    envFile,
    Object.entries(merged)
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join('\n'),
    { mode: 0o600 },
  );

  const inspector = await inspectorPort();
  if (inspector !== DEFAULT_INSPECTOR_PORT) {
    say(`devtools inspector on port ${inspector}`);
  }
  const wrangler = spawn(
    process.execPath,
    [
      `${root}node_modules/wrangler/bin/wrangler.js`,
      'dev',
      '--port',
      String(port),
      '--ip',
      '127.0.0.1',
      '--env-file',
      envFile,
      '--inspector-port',
      String(inspector),
      '--test-scheduled',
      '--show-interactive-dev-session=false',
      ...(process.env.DEV_PERSIST_DIR ? ['--persist-to', process.env.DEV_PERSIST_DIR] : []),
    ],
    { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_D1_WARNING: 'true' } },
  );
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        if (wrangler.exitCode !== null) {
          resolve();
          return;
        }
        wrangler.once('exit', () => resolve());
        wrangler.kill('SIGINT');
        setTimeout(() => wrangler.kill('SIGKILL'), 5000).unref();
      }),
  );
  let ready = false;
  const onOutput = (chunk: Buffer) => {
    const text = chunk.toString();
    process.stdout.write(text);
    if (!ready && /Ready on/.test(text)) {
      ready = true;
      say(`edge-seckill is running at ${url}`);
      say(`  shopper page  ${url}/`);
      say(`  ops dashboard ${url}/admin.html (admin token: ${vars.ADMIN_TOKEN ?? 'see .dev.vars'})`);
      say(`  cron          ${url}/__scheduled?cron=*+*+*+*+*`);
      say('Ctrl-C stops everything.');
      if (cron.on) {
        const schedule = startDevCron({ url, intervalMs: cron.intervalMs, say });
        closers.push(async () => schedule.stop());
      }
    }
  };
  wrangler.stdout.on('data', onOutput);
  wrangler.stderr.on('data', onOutput);
  wrangler.once('exit', (code) => {
    say(`wrangler exited (${code})`);
    void shutdown(code ?? 1);
  });
}

process.once('SIGINT', () => void shutdown(0));
process.once('SIGTERM', () => void shutdown(0));
main().catch(async (error) => {
  console.error(`[dev] failed: ${error instanceof Error ? error.message : String(error)}`);
  await shutdown(1);
});
