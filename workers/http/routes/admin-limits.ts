import { Hono } from 'hono';
import { z } from 'zod';
import { allGuardShards, guardShard, limitsStore } from '../../../durable-objects/routing';
import { forgetLocalBan, ipKey } from '../../edge/client-guard';
import { rememberLimits } from '../../edge/limits';
import { UserId } from '../../kernel/contract';
import { LimitsPatch } from '../../kernel/limits';
import type { AppEnv } from '../context';
import { adminAuth } from '../middleware/admin-auth';
import { requireJson } from '../middleware/require-json';
import { valid } from '../middleware/validate';

const UnbanBody = z.union([z.object({ ip: z.union([z.ipv4(), z.ipv6()]) }).strict(), z.object({ userId: UserId }).strict()]);

/**
 * The traffic switch: GET/PUT /admin/limits read and change every edge limit at runtime (a change
 * reaches every isolate within a few seconds); /admin/limits/bans lists bans and lifts one.
 */
export const adminLimits = new Hono<AppEnv>()
  .use(adminAuth)

  .get('/', async (c) => {
    const { limits, updatedAt } = await limitsStore(c.env).getLimits();
    return c.json({ ...limits, updatedAt });
  })

  .put('/', requireJson, valid('json', LimitsPatch), async (c) => {
    const { limits, updatedAt } = await limitsStore(c.env).setLimits(c.req.valid('json'));
    rememberLimits(limits);
    return c.json({ ...limits, updatedAt });
  })

  .get('/bans', async (c) => {
    const perShard = await Promise.all(allGuardShards(c.env).map((s) => s.listBans()));
    return c.json({ bans: perShard.flat().sort((a, b) => a.until.localeCompare(b.until)) });
  })

  .post('/bans/lift', requireJson, valid('json', UnbanBody), async (c) => {
    const body = c.req.valid('json');
    let ids: string[];
    if ('ip' in body) {
      ids = [ipKey(body.ip.toLowerCase())];
    } else {
      // Without an address the shopper was also counted under its stand-in key.
      ids = [`user:${body.userId}`, `anon:${body.userId}`];
    }
    const lifted = await Promise.all(ids.map((id) => guardShard(c.env, id).unban(id)));
    for (const id of ids) {
      forgetLocalBan(id);
    }
    return c.json({ ids, lifted: lifted.some(Boolean) });
  });
