import { z } from 'zod';
import type { AdmitKey, BanPolicy } from '../kernel/contract';
import { AppError } from '../kernel/errors';
import type { Limits } from '../kernel/limits';
import { log } from '../kernel/log';
import type { WaitUntil } from './group-commit';
import { limiter, scheduleGuardReport, spreadBans } from './guard-reports';

// Per-IP and per-user limits and bans at the edge: who the client is, the coarse Rate Limiting
// shield in front of it all, and the exact limits and bans, decided by this isolate's limiter
// (client-limiter.ts) and accounted fleet-wide by the EdgeGuard shards in the background.

/** The sale routes the limits count separately per shopper (and together per address). */
export type SaleAction = 'challenge' | 'token' | 'purchase';
/** The order routes, counted the same way but apart from the sale's, so reading an order never eats the purchase budget. */
export type OrderAction = 'order' | 'pay' | 'cancel' | 'sandbox';
export type ClientAction = SaleAction | OrderAction;

const SALE_ACTIONS: readonly ClientAction[] = ['challenge', 'token', 'purchase'];

/** The shield binding's settings in wrangler.toml ([[ratelimits]] IP_SHIELD): 1000 per 10 s. */
export const SHIELD_LIMIT = 1_000;
export const SHIELD_PERIOD_SECONDS = 10;

const Ip = z.union([z.ipv4(), z.ipv6()]);

/**
 * The client address Cloudflare puts in `cf-connecting-ip`; undefined when the header is absent
 * (local tools and tests). A malformed header is bad input.
 */
export function clientIp(header: string | undefined): string | undefined {
  if (header === undefined) {
    return undefined;
  }
  const address = header.trim();
  // Most addresses are IPv4: zod's own pattern for them, without a parse per request.
  if (z.regexes.ipv4.test(address)) {
    return address;
  }
  const parsed = Ip.safeParse(address);
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

function bannedError(until: number, now: number): AppError {
  const seconds = Math.max(1, Math.ceil((until - now) / 1000));
  return new AppError('BANNED', `too many requests; blocked for ${seconds} s`, { 'retry-after': String(seconds) });
}

/**
 * Refuses at once a client this isolate knows to be banned. An old ban is asked about in the
 * background (an operator may have lifted it), so the next report goes out.
 */
export function checkLocalBans(env: Env, ids: string[], waitUntil: WaitUntil | undefined, now = Date.now()): void {
  const ban = limiter.knownBan(ids, now);
  if (ban) {
    scheduleGuardReport(env, undefined, waitUntil, now);
    throw bannedError(ban.until, now);
  }
}

/** Forgets a client in this isolate (after an operator lifted its ban here). */
export function forgetLocalBan(id: string): void {
  limiter.forget(id);
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

/**
 * Admits one sale or order request of a client or throws the contract's answer: 403 BANNED or
 * 429 RATE_LIMITED (both with Retry-After). Decided in the isolate, from its own exact windows
 * and what the guard shards last told it (see client-limiter.ts), so an admitted request waits
 * on no object; the accounting goes to the shards in the background. Only a request that sets
 * off a new ban waits, to carry the ban to its shard.
 */
export async function admitClient(env: Env, keys: AdmitKey[], limits: Limits, waitUntil?: WaitUntil, now = Date.now()): Promise<void> {
  checkLocalBans(
    env,
    keys.map((k) => k.id),
    waitUntil,
    now,
  );
  const policy = banPolicy(limits);
  const { verdict, newBans } = limiter.admit(keys, policy, now);
  scheduleGuardReport(env, policy, waitUntil, now);
  if (verdict.ok) {
    return;
  }
  if (verdict.reason === 'BANNED') {
    await spreadBans(env, newBans, policy);
    throw bannedError(now + verdict.retryAfterMs, now);
  }
  throw new AppError('RATE_LIMITED', undefined, { 'retry-after': String(Math.max(1, Math.ceil(verdict.retryAfterMs / 1000))) });
}
