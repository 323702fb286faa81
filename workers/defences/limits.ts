import { z } from 'zod';
import { AppError } from '../kernel/errors';
import { log } from '../kernel/log';
import { limitsStore } from './guard-routing';

// The traffic switch (流量开关): every edge limit lives in one durable record and can be
// changed at runtime with PUT /admin/limits. Each isolate keeps a copy for LIMITS_TTL_MS, so a
// change reaches the whole fleet within a few seconds without a redeploy.

/** Defaults from the seeds: 10 req/s per IP, 3 req/s per user, 10,000 QPS per sale, ban after >100 requests in 10 s for 10 minutes. */
export const DEFAULT_LIMITS = {
  perIpPerSecond: 10,
  perUserPerSecond: 3,
  admissionPerSecond: 10_000,
  admissionByGoods: {},
  banThreshold: 100,
  banWindowSeconds: 10,
  banSeconds: 600,
  powDifficulty: 0,
  inFlightPerGoods: 200,
} satisfies Limits;

/** How long an isolate trusts its copy of the limits. */
export const LIMITS_TTL_MS = 2_000;
/** A refresh that has not finished after this long is presumed lost (its request was cancelled). */
const REFRESH_STUCK_MS = 5_000;

const MAX_RATE = 1_000_000;
const Rate = z.number().int().min(1).max(MAX_RATE);
/** 0 closes the gate: nothing reaches the goods' object and shoppers get 503 BUSY. */
const AdmissionRate = z.number().int().min(0).max(MAX_RATE);
const GoodsKey = z
  .string()
  .regex(/^[1-9][0-9]{0,15}$/, 'goods ids are positive integers')
  .refine((k) => Number(k) <= Number.MAX_SAFE_INTEGER, 'goods id too large');

const fields = {
  /** Exact sliding-window limit per client IP over the sale routes (challenge, token, purchase). */
  perIpPerSecond: Rate,
  /** Exact sliding-window limit per shopper and route. */
  perUserPerSecond: Rate,
  /** Requests let through to a goods' stock object per second (default for every goods). */
  admissionPerSecond: AdmissionRate,
  /** Per-goods overrides of `admissionPerSecond`. */
  admissionByGoods: z.record(GoodsKey, AdmissionRate),
  /** A client (IP or shopper) making more than this many sale requests in `banWindowSeconds` is banned. */
  banThreshold: z.number().int().min(1).max(100_000_000),
  banWindowSeconds: z.number().int().min(1).max(3_600),
  banSeconds: z
    .number()
    .int()
    .min(1)
    .max(7 * 24 * 3_600),
  /** Leading zero bits the proof of work must reach; 0 turns it off. */
  powDifficulty: z.number().int().min(0).max(32),
  /** Purchases one isolate may have waiting on a goods' object before it answers BUSY. */
  inFlightPerGoods: z.number().int().min(1).max(100_000),
};

export const Limits = z.object(fields);
export type Limits = z.infer<typeof Limits>;

/** PUT /admin/limits takes a subset of the fields; `admissionByGoods` entries set to null drop the override. */
export const LimitsPatch = z
  .object({
    perIpPerSecond: fields.perIpPerSecond.optional(),
    perUserPerSecond: fields.perUserPerSecond.optional(),
    admissionPerSecond: fields.admissionPerSecond.optional(),
    admissionByGoods: z
      .record(GoodsKey, AdmissionRate.nullable())
      .refine((r) => Object.keys(r).length <= 1_000, 'at most 1000 overrides per request')
      .optional(),
    banThreshold: fields.banThreshold.optional(),
    banWindowSeconds: fields.banWindowSeconds.optional(),
    banSeconds: fields.banSeconds.optional(),
    powDifficulty: fields.powDifficulty.optional(),
    inFlightPerGoods: fields.inFlightPerGoods.optional(),
  })
  .strict()
  .refine((p) => Object.keys(p).length > 0, 'name at least one limit to change');
export type LimitsPatch = z.infer<typeof LimitsPatch>;

/** Applies a validated patch; the result is validated again so stored limits are always whole. */
export function applyPatch(current: Limits, patch: LimitsPatch): Limits {
  const { admissionByGoods, ...rest } = patch;
  const byGoods: Record<string, number> = { ...current.admissionByGoods };
  for (const [goodsId, rate] of Object.entries(admissionByGoods ?? {})) {
    if (rate === null) {
      delete byGoods[goodsId];
    } else {
      byGoods[goodsId] = rate;
    }
  }
  return Limits.parse({ ...current, ...rest, admissionByGoods: byGoods });
}

/**
 * Reads stored limits written by any earlier version: unknown fields are dropped, missing or
 * invalid ones take their default, so adding a limit later needs no data migration.
 */
export function readStoredLimits(raw: unknown): Limits {
  const source = typeof raw === 'object' && raw !== null ? (raw as Record<string, unknown>) : {};
  const out: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries(fields)) {
    const parsed = schema.safeParse(source[name]);
    out[name] = parsed.success ? parsed.data : DEFAULT_LIMITS[name as keyof Limits];
  }
  return Limits.parse(out);
}

/** The admission rate of one goods: its override, else the default. */
export function admissionRate(limits: Limits, goodsId: number): number {
  return limits.admissionByGoods[String(goodsId)] ?? limits.admissionPerSecond;
}

type Cached = { limits: Limits; at: number };
let cached: Cached | undefined;
let refreshStartedAt = 0;

/**
 * The limits as this isolate knows them. A stale copy is served while one request refreshes it
 * (awaiting only its own call: a request must not wait on another request's I/O in workerd).
 */
export async function currentLimits(env: Env, now = Date.now()): Promise<Limits> {
  if (cached && now - cached.at < LIMITS_TTL_MS) {
    return cached.limits;
  }
  if (cached && now - refreshStartedAt < REFRESH_STUCK_MS) {
    return cached.limits;
  }
  refreshStartedAt = now;
  try {
    const { limits } = await limitsStore(env).getLimits();
    cached = { limits, at: Date.now() };
    return limits;
  } catch (error) {
    log.warn('limits.refresh_failed', { error });
    if (cached) {
      // Keep serving the last known limits; try again in half a second, not on every request.
      cached = { limits: cached.limits, at: Date.now() - LIMITS_TTL_MS + 500 };
      return cached.limits;
    }
    throw new AppError('BUSY', 'the sale is busy, please retry', { 'retry-after': '1' });
  } finally {
    refreshStartedAt = 0;
  }
}

/** Replaces this isolate's copy at once (after a change made through this isolate). */
export function rememberLimits(limits: Limits): void {
  cached = { limits, at: Date.now() };
}
