import { z } from 'zod';

const flag = z
  .string()
  .optional()
  .transform((v) => v === 'true' || v === '1');
const optionalText = z
  .string()
  .optional()
  .transform((v) => (v ? v : undefined));

const ConfigSchema = z.object({
  AUTH_JWT_SECRET: z.string().min(16, 'must be at least 16 characters'),
  ADMIN_TOKEN: z.string().min(8, 'must be at least 8 characters'),
  TOKEN_SECRET: z.string().min(16, 'must be at least 16 characters'),
  PAYMENT_WEBHOOK_SECRET: z.string().min(16, 'must be at least 16 characters'),
  DATABASE_URL: z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL'),
  PG_WS_PROXY: optionalText,
  TURNSTILE_SECRET_KEY: optionalText,
  TURNSTILE_SITE_KEY: optionalText,
  UPSTASH_REDIS_REST_URL: optionalText,
  UPSTASH_REDIS_REST_TOKEN: optionalText,
  DEV_MODE: flag,
});

export type Config = {
  jwtSecret: string;
  adminToken: string;
  tokenSecret: string;
  paymentWebhookSecret: string;
  databaseUrl: string;
  pgWsProxy: string | undefined;
  turnstile: { secretKey: string; siteKey: string } | undefined;
  redis: { url: string; token: string } | undefined;
  devMode: boolean;
};

/** A configuration problem, naming the variable, raised before any handler runs. */
export class ConfigError extends Error {
  constructor(readonly issues: string[]) {
    super(`invalid configuration: ${issues.join('; ')}`);
    this.name = 'ConfigError';
  }
}

const cache = new WeakMap<object, Config>();

/** Parses `env` once per isolate (the object is stable across requests). */
export function getConfig(env: Env): Config {
  const cached = cache.get(env);
  if (cached) {
    return cached;
  }
  const parsed = ConfigSchema.safeParse(env);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`));
  }
  const e = parsed.data;
  const config: Config = {
    jwtSecret: e.AUTH_JWT_SECRET,
    adminToken: e.ADMIN_TOKEN,
    tokenSecret: e.TOKEN_SECRET,
    paymentWebhookSecret: e.PAYMENT_WEBHOOK_SECRET,
    databaseUrl: e.DATABASE_URL,
    pgWsProxy: e.PG_WS_PROXY,
    turnstile:
      e.TURNSTILE_SECRET_KEY && e.TURNSTILE_SITE_KEY ? { secretKey: e.TURNSTILE_SECRET_KEY, siteKey: e.TURNSTILE_SITE_KEY } : undefined,
    redis:
      e.UPSTASH_REDIS_REST_URL && e.UPSTASH_REDIS_REST_TOKEN
        ? { url: e.UPSTASH_REDIS_REST_URL, token: e.UPSTASH_REDIS_REST_TOKEN }
        : undefined,
    devMode: e.DEV_MODE,
  };
  cache.set(env, config);
  return config;
}
