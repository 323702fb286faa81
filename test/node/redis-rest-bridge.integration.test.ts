// The Upstash REST bridge, driven by the real @upstash/redis client (default options:
// auto-pipelining and base64 responses on) against a real redis-server.
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { Redis } from '@upstash/redis';
import { Redis as IORedis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { freePort } from '../../scripts/lib/free-port.ts';
import { startRedisRestBridge } from '../../scripts/lib/redis-rest-bridge.ts';

const REDIS_URL = process.env.TEST_REDIS_URL;
const SKIP_MESSAGE = 'set TEST_REDIS_URL=redis://127.0.0.1:6379 to run';
if (!REDIS_URL) {
  console.warn(`redis-rest-bridge.integration: skipped, ${SKIP_MESSAGE}`);
}

const TOKEN = 'bridge-test-token';
// Every key of this run lives under one prefix, so runs never collide and cleanup is one scan.
const PREFIX = `bridge-test:${process.pid}:${Date.now()}:`;
const key = (name: string) => `${PREFIX}${name}`;

type Bridge = Awaited<ReturnType<typeof startRedisRestBridge>>;

/** A raw request to the bridge, for what the client cannot send or hides. */
async function post(bridge: Bridge, path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${bridge.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, type: res.headers.get('content-type'), json: (await res.json()) as unknown };
}

/** A TCP forwarder in front of redis that can be cut and restored, to fake an outage. */
function outageProxy(target: URL) {
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(Number(target.port || 6379), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => socket.destroy());
      socket.on('close', () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  });
  return {
    async listen(port: number) {
      server.listen(port, '127.0.0.1');
      await once(server, 'listening');
    },
    async cut() {
      const closed = new Promise((resolve) => server.close(resolve));
      for (const socket of sockets) {
        socket.destroy();
      }
      await closed;
    },
  };
}

describe('redis REST bridge with no redis behind it', () => {
  let bridge: Bridge;
  let redis: Redis;

  beforeAll(async () => {
    bridge = await startRedisRestBridge({ redisUrl: `redis://127.0.0.1:${await freePort()}`, token: TOKEN });
    redis = new Redis({ url: bridge.url, token: TOKEN });
  });
  afterAll(async () => {
    await bridge?.close();
  });

  it('fails fast with a JSON 503 instead of hanging', async () => {
    const started = Date.now();
    await expect(redis.get(key('x'))).rejects.toThrow(/redis unavailable/);
    await expect(redis.multi().set(key('x'), 1).exec()).rejects.toThrow(/redis unavailable/);
    expect(Date.now() - started).toBeLessThan(1000);

    const res = await post(bridge, '/', ['GET', key('x')]);
    expect(res.status).toBe(503);
    expect(res.type).toBe('application/json');
    expect(res.json).toEqual({ error: expect.stringMatching(/^ERR redis unavailable/) });
  });
});

describe.skipIf(!REDIS_URL)(`redis REST bridge against redis-server (${SKIP_MESSAGE})`, () => {
  const redisUrl = REDIS_URL ?? '';
  let bridge: Bridge;
  let redis: Redis;
  /** Same client without JSON parsing of values, to see exactly what came back. */
  let raw: Redis;
  /** A direct connection, to check what redis really holds. */
  let admin: IORedis;

  beforeAll(async () => {
    bridge = await startRedisRestBridge({ redisUrl, token: TOKEN });
    redis = new Redis({ url: bridge.url, token: TOKEN });
    raw = new Redis({ url: bridge.url, token: TOKEN, automaticDeserialization: false });
    admin = new IORedis(redisUrl);
  });

  afterAll(async () => {
    const keys = await admin.keys(`${PREFIX}*`);
    if (keys.length > 0) {
      await admin.del(...keys);
    }
    await admin.quit();
    await bridge.close();
  });

  it('round-trips strings exactly, including unicode and values that look like numbers, JSON or base64', async () => {
    const values = [
      'hello',
      'héllo wörld 你好 🚀',
      '12345',
      '007',
      '1e3',
      '{"a":1,"b":[2]}',
      '[1,2]',
      'null',
      'true',
      'OK',
      'T0s=',
      '',
      ' padded ',
    ];
    const keys = values.map((_, i) => key(`str:${i}`));
    await Promise.all(values.map((v, i) => raw.set(keys[i] ?? '', v)));
    for (const [i, v] of values.entries()) {
      expect(await raw.get(keys[i] ?? '')).toBe(v);
      expect(await admin.get(keys[i] ?? '')).toBe(v);
    }
    // Inside arrays even "OK" is base64-encoded, or the client would decode it to garbage.
    expect(await raw.mget(...keys)).toEqual(values);
  });

  it('lets the default client deserialize numbers and JSON as it would against Upstash', async () => {
    await redis.set(key('num'), '12345');
    await redis.set(key('obj'), { a: 1, list: ['x', 2] });
    expect(await redis.get(key('num'))).toBe(12345);
    expect(await redis.get(key('obj'))).toEqual({ a: 1, list: ['x', 2] });
    expect(await admin.get(key('obj'))).toBe('{"a":1,"list":["x",2]}');
    expect(await redis.get(key('missing'))).toBeNull();
  });

  it('keeps binary values byte-exact in base64 responses and answers plain JSON without the header', async () => {
    const bytes = Buffer.from([0, 255, 128, 10, 13, 0xc3, 0x28, 0x80]);
    await admin.set(key('bin'), bytes);
    const encoded = await post(bridge, '/', ['GET', key('bin')], { 'Upstash-Encoding': 'base64' });
    expect(encoded.json).toEqual({ result: bytes.toString('base64') });

    // A top-level "OK" stays plain, as Upstash sends it; other strings are encoded.
    const B64 = { 'Upstash-Encoding': 'base64' };
    expect((await post(bridge, '/', ['SET', key('ok'), 'OK'], B64)).json).toEqual({ result: 'OK' });
    expect((await post(bridge, '/', ['PING'], B64)).json).toEqual({ result: Buffer.from('PONG').toString('base64') });

    await admin.set(key('plain'), 'héllo');
    const plain = await post(bridge, '/', ['GET', key('plain')]);
    expect(plain).toEqual({ status: 200, type: 'application/json', json: { result: 'héllo' } });
  });

  it('runs incr and decr', async () => {
    expect(await redis.incr(key('counter'))).toBe(1);
    expect(await redis.incrby(key('counter'), 10)).toBe(11);
    expect(await redis.decr(key('counter'))).toBe(10);
    expect(await redis.decrby(key('counter'), 4)).toBe(6);
    expect(await admin.get(key('counter'))).toBe('6');
  });

  it('runs hset and hgetall', async () => {
    expect(await redis.hset(key('hash'), { name: 'Ada', count: 3, status: 'OK', json: { x: 1 } })).toBe(4);
    expect(await redis.hgetall(key('hash'))).toEqual({ name: 'Ada', count: 3, status: 'OK', json: { x: 1 } });
    expect(await admin.hgetall(key('hash'))).toEqual({ name: 'Ada', count: '3', status: 'OK', json: '{"x":1}' });
    expect(await redis.hgetall(key('no-hash'))).toBeNull();
  });

  it('runs sadd, sismember and smembers', async () => {
    expect(await redis.sadd(key('set'), 'a', 'b', 'c')).toBe(3);
    expect(await redis.sadd(key('set'), 'a')).toBe(0);
    expect(await redis.sismember(key('set'), 'b')).toBe(1);
    expect(await redis.sismember(key('set'), 'z')).toBe(0);
    expect((await redis.smembers(key('set'))).sort()).toEqual(['a', 'b', 'c']);
  });

  it('runs expire and ttl', async () => {
    await redis.set(key('ttl'), 'v');
    expect(await redis.ttl(key('ttl'))).toBe(-1);
    expect(await redis.expire(key('ttl'), 100)).toBe(1);
    const ttl = await redis.ttl(key('ttl'));
    expect(ttl).toBeGreaterThan(90);
    expect(ttl).toBeLessThanOrEqual(100);
    expect(await redis.ttl(key('no-ttl'))).toBe(-2);
  });

  it('returns pipeline results in order, with per-command errors', async () => {
    const p = redis.pipeline();
    p.set(key('p:str'), 'v');
    p.incr(key('p:n'));
    p.get(key('p:str'));
    p.mget(key('p:str'), key('p:none'));
    p.hgetall(key('p:none'));
    expect(await p.exec()).toEqual(['OK', 1, 'v', ['v', null], null]);

    const withError = redis.pipeline();
    withError.incr(key('p:str'));
    withError.incr(key('p:n'));
    expect(await withError.exec({ keepErrors: true })).toEqual([
      { error: expect.stringMatching(/^ERR value is not an integer/), result: undefined },
      { error: undefined, result: 2 },
    ]);
    await expect(redis.pipeline().incr(key('p:str')).exec()).rejects.toThrow(/not an integer/);
  });

  it('runs multi() transactions', async () => {
    const tx = redis.multi();
    tx.set(key('tx'), '1');
    tx.incr(key('tx'));
    tx.get(key('tx'));
    expect(await tx.exec()).toEqual(['OK', 2, 2]);
  });

  it('keeps concurrent transactions atomic among concurrent plain commands', async () => {
    const list = key('tx:list');
    await Promise.all(
      Array.from({ length: 50 }, (_, i) => [
        redis.multi().rpush(list, `begin:${i}`).rpush(list, `end:${i}`).exec(),
        redis.rpush(list, 'noise'),
      ]).flat(),
    );
    const items = await admin.lrange(list, 0, -1);
    expect(items).toHaveLength(150);
    for (const [i, item] of items.entries()) {
      if (item.startsWith('begin:')) {
        expect(items[i + 1]).toBe(item.replace('begin', 'end'));
      }
    }
  });

  it('reports runtime errors inside a transaction per command, and aborts on queueing errors', async () => {
    const runtime = await post(bridge, '/multi-exec', [
      ['SET', key('tx:err'), 'abc'],
      ['INCR', key('tx:err')],
    ]);
    expect(runtime.status).toBe(200);
    expect(runtime.json).toEqual([{ result: 'OK' }, { error: expect.stringMatching(/^ERR value is not an integer/) }]);

    const aborted = await post(bridge, '/multi-exec', [['SET', key('tx:aborted'), 'x'], ['NO-SUCH-COMMAND']]);
    expect(aborted.status).toBe(400);
    expect(aborted.json).toEqual({ error: expect.stringMatching(/^EXECABORT .*unknown command/) });
    expect(await admin.exists(key('tx:aborted'))).toBe(0);
  });

  it('passes eval through, including nested arrays and status replies', async () => {
    const script = "return {KEYS[1], ARGV[1], 42, redis.status_reply('OK'), {'OK', 7, {'deep'}}}";
    expect(await redis.eval(script, [key('eval')], ['val'])).toEqual([key('eval'), 'val', 42, 'OK', ['OK', 7, ['deep']]]);
  });

  it('keeps the NOSCRIPT error so createScript falls back from evalsha to eval', async () => {
    // Unique per run so it is not cached yet (SCRIPT FLUSH would disturb other users of redis).
    const source = `return ARGV[1] .. '@' .. KEYS[1] -- ${PREFIX}`;
    const sha = createHash('sha1').update(source).digest('hex');
    await expect(redis.evalsha(sha, [key('script')], ['a'])).rejects.toThrow(/NOSCRIPT/);
    const script = redis.createScript<string>(source);
    expect(await script.exec([key('script')], ['b'])).toBe(`b@${key('script')}`);
    expect(await redis.evalsha(sha, [key('script')], ['c'])).toBe(`c@${key('script')}`);
  });

  it('rejects a wrong token with a JSON 401 that the client turns into an error', async () => {
    const intruder = new Redis({ url: bridge.url, token: 'wrong-token' });
    await expect(intruder.get(key('x'))).rejects.toThrow(/Unauthorized/);
    const res = await fetch(bridge.url, { method: 'POST', body: JSON.stringify(['GET', key('x')]) });
    expect(res.status).toBe(401);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(await res.json()).toEqual({ error: 'Unauthorized' });
  });

  it('answers malformed requests, unknown paths and redis errors with JSON', async () => {
    await admin.hset(key('wrongtype'), 'field', 'value');
    const cases: [string, unknown, number][] = [
      ['/', 'not json', 400],
      ['/', { command: 'GET' }, 400],
      ['/', [], 400],
      ['/', ['GET', { nested: true }], 400],
      ['/', ['MULTI'], 400], // would hijack the shared connection
      ['/pipeline', [['GET', key('x')], 'GET'], 400],
      ['/multi-exec', 'GET', 400],
      ['/no-such-path', ['GET', key('x')], 404],
      ['/', ['INCR', key('wrongtype')], 400], // an error reply from redis
    ];
    for (const [path, body, status] of cases) {
      const res = await post(bridge, path, body);
      expect({ path, body, status: res.status, type: res.type }).toEqual({ path, body, status, type: 'application/json' });
      expect(res.json).toEqual({ error: expect.any(String) });
    }
    expect((await post(bridge, '/', ['INCR', key('wrongtype')])).json).toEqual({ error: expect.stringMatching(/^WRONGTYPE/) });
    const get = await fetch(bridge.url, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(get.status).toBe(405);
    expect(await get.json()).toEqual({ error: expect.any(String) });
  });

  it('counts exactly under 500 concurrent increments', async () => {
    const results = await Promise.all(Array.from({ length: 500 }, () => redis.incr(key('race'))));
    expect(results.sort((a, b) => a - b)).toEqual(Array.from({ length: 500 }, (_, i) => i + 1));
    expect(await admin.get(key('race'))).toBe('500');
  });

  it('fails fast while redis is unreachable and recovers by itself when it is back', async () => {
    const port = await freePort();
    const proxy = outageProxy(new URL(redisUrl));
    await proxy.listen(port);
    const viaProxy = new URL(redisUrl);
    viaProxy.host = `127.0.0.1:${port}`;
    const flaky = await startRedisRestBridge({ redisUrl: viaProxy.href, token: TOKEN });
    try {
      const client = new Redis({ url: flaky.url, token: TOKEN });
      await client.set(key('outage'), 'before');

      await proxy.cut();
      const started = Date.now();
      await expect(client.get(key('outage'))).rejects.toThrow(/redis unavailable/);
      expect(Date.now() - started).toBeLessThan(1000);

      await proxy.listen(port);
      await vi.waitFor(async () => expect(await client.get(key('outage'))).toBe('before'), {
        timeout: 5000,
        interval: 100,
      });
    } finally {
      await flaky.close();
      await proxy.cut();
    }
  });
});
