-- The edge keeps an allowlist goods' list as fingerprints, one copy per version: every change of
-- the list moves this after it, and the isolates learn of it with the goods list they already read.
ALTER TABLE "seckill_goods" ADD COLUMN "allowlist_version" integer DEFAULT 0 NOT NULL;