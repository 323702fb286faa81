import { z } from 'zod';

// The runtime limits (the traffic switch, 流量开关): one durable record that PUT /admin/limits
// changes and every isolate reads. The record's shape is contract (the admin API, the limits
// store's RPC); where it is kept and how isolates cache it live elsewhere.

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

const MAX_RATE = 1_000_000;
const Rate = z.number().int().min(1).max(MAX_RATE);
/** 0 closes the gate: nothing reaches the goods' object and shoppers get 503 BUSY. */
const AdmissionRate = z.number().int().min(0).max(MAX_RATE);
const GoodsKey = z
  .string()
  .regex(/^[1-9][0-9]{0,15}$/, 'goods ids are positive integers')
  .refine((k) => Number(k) <= Number.MAX_SAFE_INTEGER, 'goods id too large');

/** Each limit's schema by name (the stored record is read field by field). */
export const LIMIT_FIELDS = {
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

export const Limits = z.object(LIMIT_FIELDS);
export type Limits = z.infer<typeof Limits>;

/** PUT /admin/limits takes a subset of the fields; `admissionByGoods` entries set to null drop the override. */
export const LimitsPatch = z
  .object({
    perIpPerSecond: LIMIT_FIELDS.perIpPerSecond.optional(),
    perUserPerSecond: LIMIT_FIELDS.perUserPerSecond.optional(),
    admissionPerSecond: LIMIT_FIELDS.admissionPerSecond.optional(),
    admissionByGoods: z
      .record(GoodsKey, AdmissionRate.nullable())
      .refine((r) => Object.keys(r).length <= 1_000, 'at most 1000 overrides per request')
      .optional(),
    banThreshold: LIMIT_FIELDS.banThreshold.optional(),
    banWindowSeconds: LIMIT_FIELDS.banWindowSeconds.optional(),
    banSeconds: LIMIT_FIELDS.banSeconds.optional(),
    powDifficulty: LIMIT_FIELDS.powDifficulty.optional(),
    inFlightPerGoods: LIMIT_FIELDS.inFlightPerGoods.optional(),
  })
  .strict()
  .refine((p) => Object.keys(p).length > 0, 'name at least one limit to change');
export type LimitsPatch = z.infer<typeof LimitsPatch>;

/** The admission rate of one goods: its override, else the default. */
export function admissionRate(limits: Limits, goodsId: number): number {
  return limits.admissionByGoods[String(goodsId)] ?? limits.admissionPerSecond;
}
