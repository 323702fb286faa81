import { z } from 'zod';
import { guardShardByName, guardShardName } from '../../durable-objects/routing';
import type { AdmitKey, AdmitVerdict, BanPolicy } from '../kernel/contract';
import { AppError } from '../kernel/errors';
import type { Limits } from '../kernel/limits';
import { log } from '../kernel/log';
import { GroupCommit, type WaitUntil } from './group-commit';

// Per-IP and per-user limits and bans, decided exactly by the EdgeGuard shard that owns each
// client key; this module is the edge's side: who the client is, a local memory of bans so a
// banned client costs no object call, and the coarse Rate Limiting shield in front of it all.

/** The sale routes the limits count separately per shopper (and together per address). */
export type SaleAction = 'challenge' | 'token' | 'purchase';
/** The order routes, counted the same way but apart from the sale's, so reading an order never eats the purchase budget. */
export type OrderAction = 'order' | 'pay' | 'cancel' | 'sandbox';
export type ClientAction = SaleAction | OrderAction;

const SALE_ACTIONS: readonly ClientAction[] = ['challenge', 'token', 'purchase'];

/** The shield binding's settings in wrangler.toml ([[ratelimits]] IP_SHIELD): 1000 per 10 s. */
export const SHIELD_LIMIT = 1_000;
export const SHIELD_PERIOD_SECONDS = 10;

/** How long an isolate answers BANNED on its own before asking the shard again (an operator may lift a ban). */
const LOCAL_BAN_TRUST_MS = 5_000;
const LOCAL_BANS_MAX = 10_000;

const Ip = z.union([z.ipv4(), z.ipv6()]);

/**
 * The client address Cloudflare puts in `cf-connecting-ip`; undefined when the header is absent
 * (local tools and tests). A malformed header is bad input.
 */
export function clientIp(header: string | undefined): string | undefined {
  if (header === undefined) {
    return undefined;
  }
  const parsed = Ip.safeParse(header.trim());
  if (!parsed.success) {
    throw new AppError('INVALID_INPUT', 'header cf-connecting-ip: not an IP address');
  }
  return parsed.data.toLowerCase();
}

/**
 * The limit key of an address. IPv6 clients are keyed by their /64, the block one subscriber
 * usually holds, so rotating addresses inside it does not escape the limits.
 */
export function ipKey(ip: string): string {
  const mapped = ip.match(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/);
  if (mapped?.[1]) {
    return `ip:${mapped[1]}`;
  }
  if (!ip.includes(':')) {
    return `ip:${ip}`;
  }
  const [head = '', tail = ''] = ip.split('::');
  const left = head ? head.split(':') : [];
  const right = ip.includes('::') && tail ? tail.split(':') : [];
  const groups = ip.includes('::')
    ? [...left, ...new Array<string>(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right]
    : left;
  return `ip6:${groups
    .slice(0, 4)
    .map((g) => (g.includes('.') ? '0' : g.replace(/^0+(?=.)/, '')))
    .join(':')}::/64`;
}

/**
 * The client's keys: its address (or, without one, a per-shopper stand-in) and the shopper. The
 * address has one rate window for the sale routes and one for the order routes; the shopper one
 * per route. A ban counts every request of the key, whatever the route.
 */
export function clientKeys(ip: string | undefined, userId: string, action: ClientAction, limits: Limits): AdmitKey[] {
  return [
    { id: ip ? ipKey(ip) : `anon:${userId}`, scope: SALE_ACTIONS.includes(action) ? 'sale' : 'orders', perSecond: limits.perIpPerSecond },
    { id: `user:${userId}`, scope: action, perSecond: limits.perUserPerSecond },
  ];
}

const localBans = new Map<string, { until: number; trustUntil: number }>();

/** Remembers a ban a guard shard reported, so this isolate refuses the client at once for a while. */
export function rememberBan(id: string, until: number, now: number): void {
  if (localBans.size >= LOCAL_BANS_MAX) {
    for (const [key, ban] of localBans) {
      if (ban.trustUntil <= now) {
        localBans.delete(key);
      }
    }
    if (localBans.size >= LOCAL_BANS_MAX) {
      localBans.clear();
    }
  }
  localBans.set(id, { until, trustUntil: Math.min(until, now + LOCAL_BAN_TRUST_MS) });
}

function bannedError(until: number, now: number): AppError {
  const seconds = Math.max(1, Math.ceil((until - now) / 1000));
  return new AppError('BANNED', `too many requests; blocked for ${seconds} s`, { 'retry-after': String(seconds) });
}

/** Refuses at once a client this isolate already knows to be banned. */
export function checkLocalBans(ids: string[], now = Date.now()): void {
  for (const id of ids) {
    const ban = localBans.get(id);
    if (!ban) {
      continue;
    }
    if (ban.trustUntil > now) {
      throw bannedError(ban.until, now);
    }
    localBans.delete(id);
  }
}

/** Forgets a ban in this isolate (after an operator lifted it here). */
export function forgetLocalBan(id: string): void {
  localBans.delete(id);
}

/**
 * The coarse outer shield: a Workers Rate Limiting binding per address, cheap and local to the
 * data centre, in front of every shopper route. Its limit is fixed at deploy, so it only applies
 * while the runtime per-IP limit is below its rate; raising the per-IP limit for a load test
 * switches it off.
 */
export async function shield(env: Env, ip: string | undefined, limits: Limits): Promise<void> {
  if (!ip || limits.perIpPerSecond * SHIELD_PERIOD_SECONDS > SHIELD_LIMIT) {
    return;
  }
  let outcome: RateLimitOutcome;
  try {
    outcome = await env.IP_SHIELD.limit({ key: ipKey(ip) });
  } catch (error) {
    // The shield is a first line only; the exact limits behind it still apply.
    log.warn('shield.unavailable', { error });
    return;
  }
  if (!outcome.success) {
    throw new AppError('RATE_LIMITED', 'too many requests from this address', { 'retry-after': String(SHIELD_PERIOD_SECONDS) });
  }
}

/** The ban rule of the runtime limits, as the guard shards apply it. */
export function banPolicy(limits: Limits): BanPolicy {
  return { threshold: limits.banThreshold, windowMs: limits.banWindowSeconds * 1000, durationMs: limits.banSeconds * 1000 };
}

/** A request's keys of one shard; the first of a batch is its sender's (its `env` makes the stub). */
type AdmitCall = { env: Env; keys: AdmitKey[]; policy: BanPolicy };

/** Concurrent admissions of this isolate go to their shard together (group commit). */
const admissions = new GroupCommit<AdmitCall, AdmitVerdict>({
  maxBatch: 256,
  maxInFlight: 1,
  // A limit check answers in milliseconds; one that takes a second is no use to the shopper.
  waitLimitMs: 1_000,
  send: (shard, calls) => {
    const [first] = calls;
    if (!first) {
      return Promise.resolve([]);
    }
    return guardShardByName(first.env, shard).admitMany(calls.map(({ keys, policy }) => ({ keys, policy })));
  },
});

/**
 * Admits one sale request of a client or throws the contract's answer: 403 BANNED or 429
 * RATE_LIMITED (both with Retry-After). The keys' shards are asked in parallel, so the check
 * costs one object round trip. When a shard cannot answer, the request is refused with BUSY
 * rather than let through unchecked.
 */
export async function admitClient(env: Env, keys: AdmitKey[], limits: Limits, waitUntil?: WaitUntil, now = Date.now()): Promise<void> {
  checkLocalBans(
    keys.map((k) => k.id),
    now,
  );
  const policy = banPolicy(limits);
  const groups = new Map<string, AdmitKey[]>();
  for (const key of keys) {
    const shard = guardShardName(key.id);
    groups.set(shard, [...(groups.get(shard) ?? []), key]);
  }
  let verdicts: AdmitVerdict[];
  try {
    verdicts = await Promise.all(
      [...groups].map(([shard, shardKeys]) => admissions.run(shard, { env, keys: shardKeys, policy }, waitUntil)),
    );
  } catch (error) {
    log.warn('guard.unavailable', { error });
    throw new AppError('BUSY', undefined, { 'retry-after': '1' });
  }
  const answeredAt = Date.now();
  let limited: { retryAfterMs: number } | undefined;
  for (const v of verdicts) {
    if (v.ok) {
      continue;
    }
    if (v.reason === 'BANNED') {
      rememberBan(v.id, answeredAt + v.retryAfterMs, answeredAt);
      throw bannedError(answeredAt + v.retryAfterMs, answeredAt);
    }
    if (!limited || v.retryAfterMs > limited.retryAfterMs) {
      limited = v;
    }
  }
  if (limited) {
    throw new AppError('RATE_LIMITED', undefined, { 'retry-after': String(Math.max(1, Math.ceil(limited.retryAfterMs / 1000))) });
  }
}
