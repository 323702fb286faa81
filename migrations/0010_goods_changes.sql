-- The edge keeps the units each shopper holds of a per-goods sale as a copy per goods (the page's
-- eligibility answer), and renews it by reading the orders that changed since its last read: this
-- index finds them.
CREATE INDEX "seckill_order_goods_changes_idx" ON "seckill_order" USING btree ("goods_id","updated_at") WHERE "seckill_order"."limit_scope" = 'goods';
