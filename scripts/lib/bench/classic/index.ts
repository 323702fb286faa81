// The classic stack's run inside `npm run bench` (classic/server.ts is the stack itself): its
// API and worker as two processes against the real redis-server and PostgreSQL, a sale with
// more stock than the phase sells, the same autocannon settings as the Worker's purchase phase,
// then the worker drained and the same invariants (every 202 has its order row, no shopper
// holds two, stock + orders = the stock it started with).
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import { round } from '../../load/metrics.ts';
import { tsNode } from '../../run-ts.ts';
import { type PhaseResult, runPhase } from '../cannon.ts';
import type { BenchUser } from '../mint.ts';
import { classicKeys } from './server.ts';

const SERVER = fileURLToPath(new URL('./server.ts', import.meta.url));
const GOODS_ID = 1;

export type ClassicRun = PhaseResult & {
  accepted: number;
  ordersPerSec: number;
  drainMs: number;
  invariants: { ok: boolean; lost: number; oversold: number; duplicates: number; detail: string };
};

/** The redis-server and PostgreSQL the classic stack may use, if both answer. */
export async function classicServices(
  redisUrl = process.env.REDIS_URL || 'redis://127.0.0.1:6379',
  databaseUrl = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres',
): Promise<{ redisUrl: string; databaseUrl: string } | { skipped: string }> {
  const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  redis.on('error', () => {});
  const db = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: 3_000 });
  try {
    await redis.connect();
    await redis.ping();
  } catch (error) {
    redis.disconnect();
    return { skipped: `no redis-server at ${redisUrl} (${error instanceof Error ? error.message : String(error)})` };
  }
  redis.disconnect();
  try {
    await db.connect();
    await db.query('SELECT 1');
  } catch (error) {
    return { skipped: `no PostgreSQL at ${databaseUrl} (${error instanceof Error ? error.message : String(error)})` };
  } finally {
    await db.end().catch(() => {});
  }
  return { redisUrl, databaseUrl };
}

/** Starts one role of classic/server.ts; resolves with the process and its first stdout line. */
async function start(role: 'api' | 'worker', env: Record<string, string>): Promise<{ child: ChildProcess; first: string }> {
  const [command, args] = tsNode(SERVER, role);
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  if (!child.stdout) {
    throw new Error('the classic stack has no stdout');
  }
  const lines = createInterface({ input: child.stdout });
  const first = await Promise.race([
    once(lines, 'line').then(([line]) => String(line)),
    once(child, 'exit').then(([code]) => {
      throw new Error(`classic ${role} exited with ${code}`);
    }),
  ]);
  return { child, first };
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode === null && child.signalCode === null) {
    child.kill('SIGTERM');
    await once(child, 'exit');
  }
}

/** One classic sale: purchases for `durationS` at `connections`, then its worker drained. */
export async function runClassic(o: {
  redisUrl: string;
  databaseUrl: string;
  jwtSecret: string;
  users: BenchUser[];
  connections: number;
  durationS: number;
}): Promise<ClassicRun> {
  const suffix = `${Date.now().toString(36)}${process.pid}`;
  const prefix = `bench-classic:${suffix}`;
  const table = `bench_classic_order_${suffix}`;
  const k = classicKeys(prefix, GOODS_ID);
  const redis = new Redis(o.redisUrl);
  const db = new pg.Client({ connectionString: o.databaseUrl });
  await db.connect();
  const stock = o.users.length;
  const children: ChildProcess[] = [];
  try {
    await db.query(`CREATE TABLE ${table} (request_id text PRIMARY KEY, user_id text NOT NULL, goods_id bigint NOT NULL,
      created_at timestamptz NOT NULL, UNIQUE (user_id, goods_id))`);
    const now = Date.now();
    await redis.set(k.stock, stock);
    await redis.hset(k.window, { start: now - 1000, end: now + 3600_000 });
    const env = {
      CLASSIC_REDIS_URL: o.redisUrl,
      CLASSIC_DATABASE_URL: o.databaseUrl,
      CLASSIC_JWT_SECRET: o.jwtSecret,
      CLASSIC_PREFIX: prefix,
      CLASSIC_TABLE: table,
    };
    const apiProcess = await start('api', env);
    children.push(apiProcess.child);
    const port = Number(/listening (\d+)/.exec(apiProcess.first)?.[1]);
    children.push((await start('worker', env)).child);

    let i = 0;
    const accepted = new Set<string>();
    const started = Date.now();
    const phase = await runPhase({
      url: `http://127.0.0.1:${port}`,
      connections: o.connections,
      durationS: o.durationS,
      maxRequests: o.users.length,
      next: () => {
        const u = o.users[Math.min(i++, o.users.length - 1)];
        return {
          method: 'POST',
          path: `/api/classic/purchase/${GOODS_ID}`,
          headers: { authorization: `Bearer ${u?.jwt ?? ''}`, 'content-type': 'application/json' },
          body: JSON.stringify({ goodsId: GOODS_ID }),
        };
      },
      onAnswer: (status, body) => {
        const id = status === 202 ? /"requestId":"([^"]+)"/.exec(body)?.[1] : undefined;
        if (id) {
          accepted.add(id);
        }
      },
    });
    const ended = Date.now();
    const deadline = ended + 300_000;
    // Drained: the list is empty and the worker wrote every unit the script took (the answers
    // autocannon stopped listening for included).
    const drained = async () =>
      (await redis.llen(k.queue)) === 0 && Number((await redis.get(k.written)) ?? 0) >= stock - Number((await redis.get(k.stock)) ?? 0);
    while (!(await drained()) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    const drainedAt = Date.now();
    const { rows } = await db.query<{ request_id: string }>(`SELECT request_id FROM ${table}`);
    const inDb = new Set(rows.map((r) => r.request_id));
    const lost = [...accepted].filter((id) => !inDb.has(id)).length;
    const left = Number((await redis.get(k.stock)) ?? 0);
    const oversold = Math.max(0, rows.length - stock);
    const twice = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM (SELECT user_id FROM ${table} GROUP BY user_id HAVING count(*) > 1) t`,
    );
    const duplicates = twice.rows[0]?.n ?? 0;
    const balanced = left + rows.length === stock;
    return {
      ...phase,
      accepted: accepted.size,
      ordersPerSec: round(rows.length / Math.max((drainedAt - started) / 1000, 0.001)),
      drainMs: drainedAt - ended,
      invariants: {
        ok: lost === 0 && oversold === 0 && duplicates === 0 && balanced,
        lost,
        oversold,
        duplicates,
        detail: `${accepted.size} answered 202, ${rows.length} order rows, ${left} left of ${stock}`,
      },
    };
  } finally {
    await Promise.all(children.map(stop));
    await db.query(`DROP TABLE IF EXISTS ${table}`).catch(() => {});
    await db.end();
    await redis.del(k.stock, k.buyers, k.window, k.queue, k.written);
    redis.disconnect();
  }
}
