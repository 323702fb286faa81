// Services for a test run or a benchmark: Postgres (embedded, or a fresh database on a real
// server), the Neon WebSocket bridge in front of it, and optionally the Upstash REST bridge.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { applyMigrations } from './migrate.mjs';
import { startEmbeddedPostgres } from './pg-embedded.mjs';
import { startRedisRestBridge } from './redis-rest-bridge.mjs';
import { startWsBridge } from './ws-bridge.mjs';

/** Creates a uniquely named database on the server of `serverUrl`; returns its URL and a dropper. */
async function freshDatabase(serverUrl) {
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
 * @param {{databaseUrl?: string, redisUrl?: string}} options
 */
export async function startTestServices({ databaseUrl, redisUrl } = {}) {
  const closers = [];
  try {
    let url;
    if (databaseUrl) {
      const fresh = await freshDatabase(databaseUrl);
      closers.push(() => fresh.drop());
      url = fresh.url;
    } else {
      const embedded = await startEmbeddedPostgres();
      closers.push(() => embedded.close());
      url = embedded.url;
    }
    await applyMigrations(url);
    const target = new URL(url);
    const bridge = await startWsBridge({ allow: [`${target.hostname}:${target.port || 5432}`] });
    closers.push(() => bridge.close());
    let redis;
    if (redisUrl) {
      redis = await startRedisRestBridge({ redisUrl, token: randomBytes(16).toString('hex') });
      closers.push(() => redis.close());
    }
    return {
      databaseUrl: url,
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
