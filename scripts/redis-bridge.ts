#!/usr/bin/env tsx
// Serve a local redis-server over the Upstash REST protocol, for @upstash/redis in dev.
// Usage: npx tsx scripts/redis-bridge.ts [--port 8079] [--host 127.0.0.1]
//          [--redis redis://127.0.0.1:6379] --token dev-token
// --redis and --token fall back to REDIS_URL and UPSTASH_REDIS_REST_TOKEN.
import { parseArgs } from 'node:util';
import { startRedisRestBridge } from './lib/redis-rest-bridge.ts';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '8079' },
    host: { type: 'string', default: '127.0.0.1' },
    redis: { type: 'string', default: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' },
    token: { type: 'string', default: process.env.UPSTASH_REDIS_REST_TOKEN },
  },
});

const port = Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`redis-bridge: --port must be an integer 0-65535, got "${values.port}"`);
  process.exit(2);
}
if (!values.token) {
  // No default token: the bridge gives full access to the database behind it.
  console.error('redis-bridge: pass --token <token> (or set UPSTASH_REDIS_REST_TOKEN)');
  process.exit(2);
}

const bridge = await startRedisRestBridge({
  redisUrl: values.redis,
  port,
  host: values.host,
  token: values.token,
});
console.log(`redis-bridge: ${bridge.url} -> ${values.redis}`);
console.log(`  UPSTASH_REDIS_REST_URL=${bridge.url}`);

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    bridge.close().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error('redis-bridge: error while closing', err);
        process.exit(1);
      },
    );
  });
}
