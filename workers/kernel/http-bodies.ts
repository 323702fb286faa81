// HTTP bodies: the requests' paths, queries and bodies the routes validate. What crosses
// the other boundaries (queues, RPC) is in contract.ts.
import { z } from 'zod';
import {
  Eligibility,
  GoodsId,
  IdempotencyKey,
  LimitScope,
  LocationHint,
  MAX_RESULT_WAIT_SECONDS,
  OrderId,
  PerUserLimit,
  RequestId,
  UserId,
} from './contract';
import { QueueSettings } from './waiting-room';

/** Sale dates are bounded to years 2000-9999: inside what Postgres and JavaScript dates hold, and any real sale. */
export const EARLIEST_SALE_DATE = Date.UTC(2000, 0, 1);
export const LATEST_SALE_DATE = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
const Millis = z
  .union([z.number().int(), z.string().datetime({ offset: true })])
  .transform((v) => new Date(v).getTime())
  .pipe(
    z
      .number({ error: 'not a valid date' })
      .min(EARLIEST_SALE_DATE, 'must be in the years 2000-9999')
      .max(LATEST_SALE_DATE, 'must be in the years 2000-9999'),
  );

/** Control characters (NUL included) and unpaired surrogates: Postgres text cannot hold some, and no title needs them. */
const CONTROL_CHARACTERS = /[\p{Cc}\p{Cs}]/u;
/** Free text a shopper sees (a goods' title): printable, one line. */
const DisplayText = (max: number) =>
  z
    .string()
    .trim()
    .min(1)
    .max(max)
    .refine((t) => !CONTROL_CHARACTERS.test(t), 'must not contain control characters');

/** How many objects a goods' stock is spread over. */
const StockShards = z.number().int().min(1).max(64);

export const CreateGoodsBody = z
  .object({
    activityId: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
    title: DisplayText(200),
    imageUrl: z.string().url().max(2000).optional(),
    priceCents: z.number().int().nonnegative().max(100_000_000),
    stock: z.number().int().nonnegative().max(10_000_000),
    startAt: Millis,
    endAt: Millis,
    payTimeoutSeconds: z.number().int().min(1).max(43_200).optional(),
    locationHint: LocationHint.optional(),
    queue: QueueSettings.optional(),
    shards: StockShards.optional(),
    perUserLimit: PerUserLimit.optional(),
    limitScope: LimitScope.optional(),
    eligibility: Eligibility.optional(),
  })
  .refine((b) => b.endAt > b.startAt, { message: 'endAt must be after startAt', path: ['endAt'] });
export type CreateGoodsBody = z.infer<typeof CreateGoodsBody>;

/** PUT /admin/goods/:goodsId: the settings that may change after creation. */
export const UpdateGoodsBody = z
  .object({
    queue: QueueSettings.optional(),
    perUserLimit: PerUserLimit.optional(),
    limitScope: LimitScope.optional(),
    eligibility: Eligibility.optional(),
    shards: StockShards.optional(),
  })
  .strict()
  .refine((b) => Object.keys(b).length > 0, 'name at least one setting to change');
export type UpdateGoodsBody = z.infer<typeof UpdateGoodsBody>;

/** A `/goods/:goodsId/...` path. */
export const GoodsParam = z.object({ goodsId: GoodsId });

/** A `/result/:requestId` path. */
export const RequestParam = z.object({ requestId: RequestId });
/** `?wait=N`: hold a QUEUED answer up to N seconds for the final one (0, the default, answers at once). */
export const ResultQuery = z.object({ wait: z.coerce.number().int().min(0).max(MAX_RESULT_WAIT_SECONDS).default(0) });
/**
 * `?fresh=1`: the eligibility answered by Postgres itself, not the edge's copies a second or two
 * behind it (the page asks so right after the shopper's own order changed).
 */
export const EligibilityQuery = z.object({ fresh: z.enum(['0', '1']).default('0') });
/**
 * A hidden path (workers/edge/signed.ts): the goods id, a dot and 32 characters of HMAC, or the
 * HMAC alone as paths were issued before they named their goods.
 */
export const PURCHASE_PATH = /^(?:([1-9]\d{0,15})\.)?([A-Za-z0-9_-]{32})$/;
export const PurchasePathParam = z.object({ path: z.string().regex(PURCHASE_PATH, 'not a purchase path') });
export const IdempotencyHeader = z.object({ 'idempotency-key': IdempotencyKey.optional() });
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,128}$/;
/** IdempotencyHeader's value when the key is absent or well-formed, without zod (validInto's `fast`). */
export function idempotencyHeaderFast(headers: unknown): z.output<typeof IdempotencyHeader> | undefined {
  const key = (headers as Record<string, unknown>)['idempotency-key'];
  if (key === undefined) {
    return {};
  }
  return typeof key === 'string' && IDEMPOTENCY_KEY.test(key) ? { 'idempotency-key': key } : undefined;
}

export const DevTokenBody = z.object({ userId: UserId });
/** Proof-of-work nonce: whatever string the client found (printable ASCII). */
export const PowNonce = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[\x21-\x7e]+$/, 'printable ASCII only');
const ChallengeIdField = z.string().min(1).max(1024);
export const TokenBody = z.union([
  z.object({ challengeId: ChallengeIdField, answer: z.union([z.string().max(64), z.number()]), powNonce: PowNonce.optional() }),
  z.object({ turnstileToken: z.string().min(1).max(4096), challengeId: ChallengeIdField.optional(), powNonce: PowNonce.optional() }),
]);
export type TokenBody = z.infer<typeof TokenBody>;
export const PurchaseBody = z.object({
  goodsId: GoodsId,
  token: z.string().min(1).max(1024),
  /** Units to buy: 1..the goods' perUserLimit (checked against the goods once it is loaded). */
  quantity: z.number().int().min(1).max(100).default(1),
});

/**
 * PurchaseBody's value for the body every shopper page sends (a numeric goods id, a token, no
 * quantity or a whole one in range), read without zod; undefined for anything else, which
 * PurchaseBody then reads or refuses (validInto's `fast`).
 */
export function purchaseBodyFast(body: unknown): z.output<typeof PurchaseBody> | undefined {
  if (typeof body !== 'object' || body === null) {
    return undefined;
  }
  const { goodsId, token, quantity } = body as Record<string, unknown>;
  if (typeof goodsId !== 'number' || !Number.isSafeInteger(goodsId) || goodsId <= 0) {
    return undefined;
  }
  if (typeof token !== 'string' || token.length < 1 || token.length > 1024) {
    return undefined;
  }
  if (quantity === undefined) {
    return { goodsId, token, quantity: 1 };
  }
  return typeof quantity === 'number' && Number.isInteger(quantity) && quantity >= 1 && quantity <= 100
    ? { goodsId, token, quantity }
    : undefined;
}

/** PurchasePathParam's value when the path has its shape, without zod (validInto's `fast`). */
export function purchasePathFast(params: unknown): { path: string } | undefined {
  const path = (params as { path?: unknown } | null)?.path;
  return typeof path === 'string' && PURCHASE_PATH.test(path) ? { path } : undefined;
}

/** Most shopper ids one allowlist change may name (both lists together). */
export const ALLOWLIST_CHANGE_MAX = 200_000;
/** PUT /admin/goods/:goodsId/allowlist. */
export const AllowlistBody = z
  .object({ add: z.array(UserId).max(ALLOWLIST_CHANGE_MAX).optional(), remove: z.array(UserId).max(ALLOWLIST_CHANGE_MAX).optional() })
  .strict()
  .refine((b) => (b.add?.length ?? 0) + (b.remove?.length ?? 0) <= ALLOWLIST_CHANGE_MAX, `at most ${ALLOWLIST_CHANGE_MAX} ids per change`);
export type AllowlistBody = z.infer<typeof AllowlistBody>;

// Orders, payments and dead letters.
export const OrderParam = z.object({ orderId: OrderId });

/** Our payment ids: made by the shop when a payment starts, echoed by the provider's webhook. */
export const PaymentId = z.string().regex(/^pay_[A-Za-z0-9_-]{22}$/, 'not a payment id');

export const PayBody = z
  .object({
    /** Sandbox provider only: how the simulated payment ends; `hold` waits for the shopper to finish it. */
    outcome: z.enum(['succeed', 'fail', 'hold']).optional(),
  })
  .strict();
export type PayBody = z.infer<typeof PayBody>;

/** The provider's webhook body (signed; verified before this is parsed). */
export const PaymentCallbackBody = z.object({
  eventId: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[\x21-\x7e]+$/, 'printable ASCII only'),
  paymentId: PaymentId,
  orderId: OrderId,
  status: z.enum(['SUCCEEDED', 'FAILED']),
  amountCents: z.number().int().nonnegative().max(2_147_483_647),
});
export type PaymentCallbackBody = z.infer<typeof PaymentCallbackBody>;

export const SandboxCompleteBody = z.object({ outcome: z.enum(['succeed', 'fail']).default('succeed') }).strict();

export const DeadLetterQuery = z.object({
  goodsId: GoodsId.optional(),
  state: z.enum(['open', 'redriven', 'all']).default('open'),
  limit: z.coerce.number().int().min(1).max(500).default(100),
});
export const DeadLetterParam = z.object({ id: z.coerce.number().int().positive().max(Number.MAX_SAFE_INTEGER) });
export const RedriveGoodsBody = z.object({ goodsId: z.number().int().positive().max(Number.MAX_SAFE_INTEGER) }).strict();

/** POST /admin/reconcile: every goods in scope, or only `goodsId`. */
export const ReconcileQuery = z.object({ goodsId: GoodsId.optional() }).strict();
