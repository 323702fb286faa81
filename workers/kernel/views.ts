// Answers of the HTTP contract that the pages read as well. Plain types with no imports, so
// web/src can import them (type-only) without pulling in the Worker's runtime or zod.

/** A goods' state as a shopper sees it. */
export type GoodsStatus = 'UPCOMING' | 'ON_SALE' | 'PAUSED' | 'SOLD_OUT' | 'ENDED';

/** One goods, as GET /api/seckill/goods and /goods/:goodsId answer it. Times are ISO 8601. */
export type GoodsView = {
  goodsId: number;
  activityId: number;
  title: string;
  imageUrl: string | null;
  priceCents: number;
  totalStock: number;
  remaining: number;
  startAt: string;
  endAt: string;
  status: GoodsStatus;
  payTimeoutSeconds: number;
  serverTime: string;
  /** Units one shopper may hold (the page's quantity picker goes up to it). */
  perUserLimit: number;
  /** `goods`, or `activity`: one live order per shopper across the activity's goods. */
  limitScope: 'goods' | 'activity';
  /** `allowlist`: only invited shoppers may buy (GET .../eligibility tells the shopper). */
  eligibility: 'open' | 'allowlist';
  /** The waiting room: `off`, or how the page joins it (POST .../queue) and when its doors open. */
  queue?: { mode: 'off' | 'auto' | 'always'; opensAt?: string };
};
