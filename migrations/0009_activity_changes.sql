-- The edge keeps who holds a live order of an activity-scoped sale as a copy per activity, and
-- renews it by reading the orders that changed since its last read: this index finds them.
CREATE INDEX "seckill_order_activity_changes_idx" ON "seckill_order" USING btree ("activity_id","updated_at") WHERE "seckill_order"."limit_scope" = 'activity';