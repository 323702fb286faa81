// The HTTP contract's answers as the load test and the bench read them, parsed rather than
// trusted: a deployment under load may answer anything, and an answer of the wrong shape is
// counted, not followed. Where the Worker declares a shape in a module the Node side can load
// (workers/kernel/contract.ts, workers/kernel/errors.ts), the type is imported from there and each reader
// below is checked to accept it, so a change on the Worker's side fails this type check.
// The stats, goods and challenge answers are typed beside their routes in the Worker, in
// modules bound to workerd's globals, so they are described here by the fields the tools use.
import { z } from 'zod';
import type { ResultView } from '../../../workers/kernel/contract.ts';
import type { errorBody } from '../../../workers/kernel/errors.ts';
import type { CreateGoodsBody, TokenBody } from '../../../workers/kernel/http-bodies.ts';

/** `T`, checked to be assignable to `U` (a Worker type a reader here must accept). */
type Accepted<T extends U, U> = T;

export type { CreateGoodsBody, TokenBody };
/** POST /admin/goods, as sent. */
export type CreateGoodsRequest = z.input<typeof CreateGoodsBody>;

const ErrorAnswer = z.object({ error: z.object({ code: z.string(), message: z.string() }).partial() });
/** The contract's error body, `{ error: { code, message, requestId } }`. */
export type ErrorBody = Accepted<ReturnType<typeof errorBody>, z.infer<typeof ErrorAnswer>>;

const ResultAnswer = z.looseObject({
  status: z.enum(['QUEUED', 'SUCCESS', 'FAIL']),
  orderId: z.string().optional(),
  reason: z.string().optional(),
});
/** GET /api/seckill/result/:requestId. */
export type Result = Accepted<ResultView, z.infer<typeof ResultAnswer>>;

const Goods = z.looseObject({ goodsId: z.number(), activityId: z.number(), priceCents: z.number() });
/** A goods as the admin API answers it (the fields the tools use). */
export type Goods = z.infer<typeof Goods>;

const Stats = z.looseObject({
  goodsId: z.number(),
  totalStock: z.number(),
  doRemaining: z.number().nullable(),
  dbStock: z.number(),
  mirrorStock: z.number().nullable(),
  /** off, ok, missing or unreachable. */
  mirror: z.string(),
  orders: z.record(z.string(), z.number()),
  queued: z.number(),
  outboxPending: z.number(),
  deadLetters: z.number().optional(),
  consistent: z.boolean(),
  /** Result reads the stock shards hold now (absent before held reads). */
  heldResultReads: z.number().optional(),
  /** The waiting room's figures, the ones the tools read (mode off: none). */
  queue: z.looseObject({ frontLagMs: z.number().nullish(), lateMs: z.number().nullish(), outstanding: z.number().nullish() }).nullish(),
});
/** GET /admin/goods/:id/stats. */
export type Stats = z.infer<typeof Stats>;

const Limits = z.record(z.string(), z.unknown());
/** GET and PUT /admin/limits: the runtime limits, by name. */
export type Limits = z.infer<typeof Limits>;

const Challenge = z.looseObject({
  challengeId: z.string(),
  kind: z.string(),
  prompt: z.string().optional(),
  pow: z.object({ prefix: z.string(), difficulty: z.number(), algorithm: z.string() }).optional(),
});
/** POST /api/seckill/goods/:id/challenge. */
export type Challenge = z.infer<typeof Challenge>;

const PurchaseToken = z.looseObject({ token: z.string(), path: z.string() });
const Ticket = z.looseObject({ ticket: z.string(), state: z.string(), pass: z.string().optional() });
const Queued = z.looseObject({ requestId: z.string() });
const DevToken = z.looseObject({ token: z.string() });
const Allowlist = z.looseObject({ count: z.number() });
const Order = z.looseObject({ goodsId: z.number().optional(), userId: z.string().optional() });

function reader<T>(schema: z.ZodType<T>): (json: unknown) => T | undefined {
  return (json) => {
    const parsed = schema.safeParse(json);
    return parsed.success ? parsed.data : undefined;
  };
}

/** Each answer's reader: its parsed body, or undefined when it has another shape. */
export const read = {
  error: reader(ErrorAnswer),
  result: reader(ResultAnswer),
  goods: reader(Goods),
  stats: reader(Stats),
  limits: reader(Limits),
  challenge: reader(Challenge),
  purchaseToken: reader(PurchaseToken),
  /** A waiting room's ticket (POST .../queue, GET .../queue/:ticket). */
  ticket: reader(Ticket),
  /** A 202 to a purchase. */
  queued: reader(Queued),
  devToken: reader(DevToken),
  order: reader(Order),
  allowlist: reader(Allowlist),
};

/** The `error` member of an error body, if the answer is one. */
export function errorOf(json: unknown): { code?: string | undefined; message?: string | undefined } | undefined {
  return read.error(json)?.error;
}
