// Services for a test run or a benchmark: Postgres (embedded, or a fresh database on a real
// server), the Neon WebSocket bridge in front of it, and optionally the Upstash REST bridge.
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import pg from 'pg';
import { applyMigrations } from './migrate.ts';
import { startEmbeddedPostgres } from './pg-embedded.ts';
import { type RedisRestBridge, startRedisRestBridge } from './redis-rest-bridge.ts';
import { startWsBridge } from './ws-bridge.ts';

/** Creates a uniquely named database on the server of `serverUrl`; returns its URL and a dropper. */
async function freshDatabase(serverUrl: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `edge_seckill_test_${Date.now()}_${randomBytes(3).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: serverUrl });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}

/**
 * A server that takes connections and never answers on them: a Postgres hung, or a network that
 * drops its packets, where a stopped server would refuse at once.
 */
async function silentServer(): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) {
          socket.destroy();
        }
        server.close(() => resolve());
      }),
  };
}

export type TestServices = {
  databaseUrl: string;
  /** A database URL the bridge serves whose server takes every connection and never answers. */
  silentDatabaseUrl: string;
  /** The embedded database's files as they are now, to start more from (undefined on a server). */
  snapshot: (() => Promise<Blob>) | undefined;
  pgWsProxy: string;
  redisRestUrl: string | undefined;
  redisRestToken: string | undefined;
  close(): Promise<void>;
};

/**
 * Postgres (a fresh database on `databaseUrl`'s server, or embedded), its bridge, and Redis' when
 * `redisUrl` is set. `goodsIdsFrom`: the first goods id the database hands out (default 1), so
 * that databases whose goods share one redis-server never name the same goods. `from`: the
 * snapshot of another embedded database's services (migrated already) to start this one from.
 */
export async function startTestServices({
  databaseUrl,
  redisUrl,
  goodsIdsFrom,
  from,
}: {
  databaseUrl?: string | undefined;
  redisUrl?: string | undefined;
  goodsIdsFrom?: number | undefined;
  from?: Blob | undefined;
} = {}): Promise<TestServices> {
  const closers: (() => Promise<void>)[] = [];
  try {
    let url: string;
    let snapshot: (() => Promise<Blob>) | undefined;
    if (databaseUrl) {
      const fresh = await freshDatabase(databaseUrl);
      closers.push(() => fresh.drop());
      url = fresh.url;
      await applyMigrations(url);
    } else {
      const embedded = await startEmbeddedPostgres({ from });
      closers.push(() => embedded.close());
      url = embedded.url;
      if (!from) {
        await applyMigrations(url);
      }
      snapshot = embedded.snapshot;
    }
    if (goodsIdsFrom !== undefined && goodsIdsFrom > 1) {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      try {
        await c.query(`SELECT setval(pg_get_serial_sequence('seckill_goods', 'id'), $1, false)`, [goodsIdsFrom]);
      } finally {
        await c.end();
      }
    }
    const target = new URL(url);
    const silent = await silentServer();
    const bridge = await startWsBridge({ allow: [`${target.hostname}:${target.port || 5432}`, `127.0.0.1:${silent.port}`] });
    closers.push(() => bridge.close());
    // Closed before the bridge (closers run last first): the bridge's connections to it, which
    // never open, end with it, where the bridge waited on them for good.
    closers.push(() => silent.close());
    let redis: RedisRestBridge | undefined;
    if (redisUrl) {
      const rest = await startRedisRestBridge({ redisUrl, token: randomBytes(16).toString('hex') });
      closers.push(() => rest.close());
      redis = rest;
    }
    return {
      databaseUrl: url,
      silentDatabaseUrl: `postgres://postgres@127.0.0.1:${silent.port}/silent`,
      snapshot,
      pgWsProxy: bridge.proxy,
      redisRestUrl: redis?.url,
      redisRestToken: redis?.token,
      async close() {
        for (const close of closers.reverse()) {
          await close().catch(() => {});
        }
      },
    };
  } catch (error) {
    for (const close of closers.reverse()) {
      await close().catch(() => {});
    }
    throw error;
  }
}
