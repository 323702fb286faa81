import { env } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { ConfigError, getConfig, MIN_SECRET_LENGTH, parseConfig } from '../../workers/kernel/config';

/** A 64-character hex string that passes the strength checks; `seed` makes each one different. */
function strong(seed: number): string {
  return Array.from({ length: 64 }, (_, i) => '0123456789abcdef'[(i * 7 + seed * 5) % 16]).join('');
}

const NEON_URL = 'postgres://app:pw@ep-quiet-sun-123456.eu-central-1.aws.neon.tech/neondb?sslmode=require';
const PRODUCTION_BUILD = { devFeatures: false };

function productionEnv(overrides: Record<string, string | undefined> = {}): Record<string, string | undefined> {
  return {
    ENVIRONMENT: 'production',
    DEV_MODE: 'false',
    AUTH_JWT_SECRET: strong(1),
    ADMIN_TOKEN: strong(2),
    TOKEN_SECRET: strong(3),
    PAYMENT_WEBHOOK_SECRET: strong(4),
    DATABASE_URL: NEON_URL,
    TURNSTILE_SECRET_KEY: `0x4AAAAAAA${strong(5).slice(0, 25)}`,
    TURNSTILE_SITE_KEY: '0x4AAAAAAAB1cD2eF3gH4iJ5',
    UPSTASH_REDIS_REST_URL: 'https://eu1-brave-owl-12345.upstash.io',
    UPSTASH_REDIS_REST_TOKEN: strong(6),
    ...overrides,
  };
}

/** The issues parseConfig reports for `e` ([] when it is accepted). */
function issuesOf(e: Record<string, unknown>, build = PRODUCTION_BUILD): string[] {
  try {
    parseConfig(e, build);
    return [];
  } catch (error) {
    if (error instanceof ConfigError) {
      return error.issues;
    }
    throw error;
  }
}

function namesIn(issues: string[]): string[] {
  return issues.map((i) => i.slice(0, i.indexOf(':')));
}

describe('production configuration', () => {
  it('accepts a complete production environment', () => {
    const config = parseConfig(productionEnv(), PRODUCTION_BUILD);
    expect(config.environment).toBe('production');
    expect(config.devMode).toBe(false);
    expect(config.sandboxPayments).toBe(false);
    expect(config.databaseUrl).toBe(NEON_URL);
    expect(config.pgWsProxy).toBeUndefined();
    expect(config.turnstile?.siteKey).toBe('0x4AAAAAAAB1cD2eF3gH4iJ5');
    expect(config.redis?.url).toBe('https://eu1-brave-owl-12345.upstash.io');
    expect(config.shopperAuth).toEqual({
      hs256Secret: strong(1),
      jwksUrl: undefined,
      issuer: undefined,
      audience: undefined,
      maxLifetimeSeconds: 24 * 3600,
    });
    expect(config.jwtSecret).toBe(strong(1));
  });

  it.each(['ADMIN_TOKEN', 'TOKEN_SECRET', 'PAYMENT_WEBHOOK_SECRET', 'DATABASE_URL', 'TURNSTILE_SECRET_KEY'])(
    'fails fast naming %s when it is missing',
    (name) => {
      const issues = issuesOf(productionEnv({ [name]: undefined }));
      expect(namesIn(issues)).toContain(name);
      expect(() => parseConfig(productionEnv({ [name]: '' }), PRODUCTION_BUILD)).toThrow(new RegExp(`${name}: `));
    },
  );

  it('needs AUTH_JWT_SECRET or AUTH_JWKS_URL, and says so', () => {
    const issues = issuesOf(productionEnv({ AUTH_JWT_SECRET: undefined }));
    expect(issues).toHaveLength(1);
    expect(issues[0]).toMatch(/^AUTH_JWT_SECRET: is required, or set AUTH_JWKS_URL/);
  });

  it('accepts a JWKS URL instead of a shared secret, and refuses to sign dev tokens without one', () => {
    const config = parseConfig(
      productionEnv({
        AUTH_JWT_SECRET: undefined,
        AUTH_JWKS_URL: 'https://login.shop.test/.well-known/jwks.json',
        AUTH_JWT_ISSUER: 'https://login.shop.test/',
      }),
      PRODUCTION_BUILD,
    );
    expect(config.shopperAuth.jwksUrl).toBe('https://login.shop.test/.well-known/jwks.json');
    expect(config.shopperAuth.issuer).toBe('https://login.shop.test/');
    expect(config.shopperAuth.hs256Secret).toBeUndefined();
    expect(() => config.jwtSecret).toThrow(/AUTH_JWT_SECRET: is required/);
  });

  it('refuses a JWKS URL that is not public https', () => {
    expect(namesIn(issuesOf(productionEnv({ AUTH_JWKS_URL: 'http://login.shop.test/jwks.json' })))).toEqual(['AUTH_JWKS_URL']);
    expect(namesIn(issuesOf(productionEnv({ AUTH_JWKS_URL: 'https://localhost/jwks.json' })))).toEqual(['AUTH_JWKS_URL']);
    expect(namesIn(issuesOf(productionEnv({ AUTH_JWKS_URL: 'not a url' })))).toEqual(['AUTH_JWKS_URL']);
  });

  it('takes a maximum shopper token lifetime in seconds, 24 h when unset', () => {
    expect(parseConfig(productionEnv({ AUTH_JWT_MAX_LIFETIME_SECONDS: '3600' }), PRODUCTION_BUILD).shopperAuth.maxLifetimeSeconds).toBe(
      3600,
    );
    expect(parseConfig(productionEnv({ AUTH_JWT_MAX_LIFETIME_SECONDS: '' }), PRODUCTION_BUILD).shopperAuth.maxLifetimeSeconds).toBe(86_400);
    for (const bad of ['0', '-5', '1.5', '1h', String(31 * 24 * 3600)]) {
      expect(namesIn(issuesOf(productionEnv({ AUTH_JWT_MAX_LIFETIME_SECONDS: bad })))).toEqual(['AUTH_JWT_MAX_LIFETIME_SECONDS']);
    }
  });

  it.each(['AUTH_JWT_SECRET', 'ADMIN_TOKEN', 'TOKEN_SECRET', 'PAYMENT_WEBHOOK_SECRET'] as const)(
    'refuses the .dev.vars.example value of %s',
    (name) => {
      // The test Worker runs on .dev.vars.example, so `env` holds exactly the committed defaults.
      const local = env[name];
      expect(local.length).toBeGreaterThan(0);
      expect(namesIn(issuesOf(productionEnv({ [name]: local })))).toEqual([name]);
      expect(namesIn(issuesOf(productionEnv({ [name]: local, ENVIRONMENT: 'staging' }), { devFeatures: false }))).toEqual([name]);
    },
  );

  it(`refuses secrets shorter than ${MIN_SECRET_LENGTH} characters and accepts ${MIN_SECRET_LENGTH}`, () => {
    const issues = issuesOf(productionEnv({ ADMIN_TOKEN: strong(7).slice(0, MIN_SECRET_LENGTH - 1) }));
    expect(issues).toEqual([expect.stringMatching(/^ADMIN_TOKEN: must be at least 32 characters in production/)]);
    expect(issuesOf(productionEnv({ ADMIN_TOKEN: strong(7).slice(0, MIN_SECRET_LENGTH) }))).toEqual([]);
  });

  it('refuses long but obviously weak secrets', () => {
    expect(namesIn(issuesOf(productionEnv({ TOKEN_SECRET: 'a'.repeat(64) })))).toEqual(['TOKEN_SECRET']);
    expect(namesIn(issuesOf(productionEnv({ TOKEN_SECRET: 'please-change-me-before-going-live-0123456789' })))).toEqual(['TOKEN_SECRET']);
    expect(namesIn(issuesOf(productionEnv({ ADMIN_TOKEN: 'dev-admin-token-but-longer-than-32-chars' })))).toEqual(['ADMIN_TOKEN']);
  });

  it('refuses DEV_MODE=true outside development', () => {
    expect(issuesOf(productionEnv({ DEV_MODE: 'true' }))).toEqual([expect.stringMatching(/^DEV_MODE: must be false in production/)]);
    expect(namesIn(issuesOf(productionEnv({ DEV_MODE: '1', ENVIRONMENT: 'staging' })))).toEqual(['DEV_MODE']);
  });

  it('refuses a flag that is neither true nor false, in any environment', () => {
    expect(namesIn(issuesOf(productionEnv({ DEV_MODE: 'yes' })))).toEqual(['DEV_MODE']);
    expect(namesIn(issuesOf({ ...env, DEV_MODE: 'on' }))).toEqual(['DEV_MODE']);
  });

  it('refuses a DATABASE_URL a deployed Worker cannot or should not use', () => {
    const cases = [
      'postgres://postgres@127.0.0.1:5432/postgres?sslmode=require',
      'postgres://postgres@localhost/postgres?sslmode=require',
      'postgres://app:pw@ep-quiet-sun-123456.eu-central-1.aws.neon.tech/neondb',
      'postgres://app:pw@ep-quiet-sun-123456.eu-central-1.aws.neon.tech/neondb?sslmode=disable',
      'mysql://app:pw@db.shop.test/shop',
      'not a url',
    ];
    for (const url of cases) {
      expect(namesIn(issuesOf(productionEnv({ DATABASE_URL: url }))), url).toContain('DATABASE_URL');
    }
    expect(issuesOf(productionEnv({ DATABASE_URL: `${NEON_URL}&channel_binding=require` }))).toEqual([]);
  });

  it('refuses the local WebSocket bridge', () => {
    expect(namesIn(issuesOf(productionEnv({ PG_WS_PROXY: '127.0.0.1:8799' })))).toEqual(['PG_WS_PROXY']);
  });

  it("requires Turnstile in production but not Cloudflare's public test keys; staging may use either", () => {
    const testKeys = { TURNSTILE_SECRET_KEY: '1x0000000000000000000000000000000AA', TURNSTILE_SITE_KEY: '1x00000000000000000000AA' };
    expect(issuesOf(productionEnv(testKeys))).toEqual([
      expect.stringMatching(/^TURNSTILE_SECRET_KEY: is one of Cloudflare's public test keys/),
    ]);
    expect(issuesOf(productionEnv({ ...testKeys, ENVIRONMENT: 'staging' }))).toEqual([]);
    const builtIn = { TURNSTILE_SECRET_KEY: undefined, TURNSTILE_SITE_KEY: undefined };
    expect(namesIn(issuesOf(productionEnv(builtIn)))).toEqual(['TURNSTILE_SECRET_KEY']);
    expect(parseConfig(productionEnv({ ...builtIn, ENVIRONMENT: 'staging' }), PRODUCTION_BUILD).turnstile).toBeUndefined();
  });

  it('needs both halves of Turnstile and of Upstash, and Upstash over public https', () => {
    expect(namesIn(issuesOf(productionEnv({ TURNSTILE_SITE_KEY: undefined })))).toEqual(['TURNSTILE_SITE_KEY']);
    expect(namesIn(issuesOf(productionEnv({ UPSTASH_REDIS_REST_TOKEN: undefined })))).toEqual(['UPSTASH_REDIS_REST_TOKEN']);
    expect(namesIn(issuesOf(productionEnv({ UPSTASH_REDIS_REST_URL: undefined })))).toEqual(['UPSTASH_REDIS_REST_URL']);
    expect(namesIn(issuesOf(productionEnv({ UPSTASH_REDIS_REST_URL: 'http://eu1-brave-owl-12345.upstash.io' })))).toEqual([
      'UPSTASH_REDIS_REST_URL',
    ]);
    const noMirror = parseConfig(productionEnv({ UPSTASH_REDIS_REST_URL: '', UPSTASH_REDIS_REST_TOKEN: '' }), PRODUCTION_BUILD);
    expect(noMirror.redis).toBeUndefined();
  });

  it('refuses a bundle built with dev features in production, not in staging', () => {
    expect(issuesOf(productionEnv(), { devFeatures: true })).toEqual([expect.stringMatching(/^__DEV_FEATURES__: /)]);
    expect(issuesOf(productionEnv({ ENVIRONMENT: 'staging' }), { devFeatures: true })).toEqual([]);
  });

  it('enables sandbox payments in staging only when asked and compiled in; never in production', () => {
    const staging = productionEnv({ ENVIRONMENT: 'staging' });
    expect(parseConfig(staging, { devFeatures: true }).sandboxPayments).toBe(false);
    expect(parseConfig({ ...staging, ENABLE_SANDBOX_PAYMENTS: 'true' }, { devFeatures: true }).sandboxPayments).toBe(true);
    expect(issuesOf({ ...staging, ENABLE_SANDBOX_PAYMENTS: 'true' }, { devFeatures: false })).toEqual([
      expect.stringMatching(/^ENABLE_SANDBOX_PAYMENTS: this bundle has no sandbox provider/),
    ]);
    expect(namesIn(issuesOf(productionEnv({ ENABLE_SANDBOX_PAYMENTS: 'true' })))).toEqual(['ENABLE_SANDBOX_PAYMENTS']);
  });

  it('applies the production rules when ENVIRONMENT is unset, and rejects unknown environments', () => {
    const unset = issuesOf({ ...env, ENVIRONMENT: undefined }, { devFeatures: false });
    expect(namesIn(unset)).toEqual(expect.arrayContaining(['ADMIN_TOKEN', 'DATABASE_URL', 'DEV_MODE', 'TURNSTILE_SECRET_KEY']));
    expect(namesIn(issuesOf(productionEnv({ ENVIRONMENT: 'prod' })))).toEqual(['ENVIRONMENT']);
  });

  it('reports every problem at once, each naming its variable', () => {
    const issues = issuesOf(productionEnv({ ADMIN_TOKEN: undefined, TOKEN_SECRET: 'short', PG_WS_PROXY: '127.0.0.1:1' }));
    expect(namesIn(issues).sort()).toEqual(['ADMIN_TOKEN', 'PG_WS_PROXY', 'TOKEN_SECRET']);
    expect(() => parseConfig(productionEnv({ ADMIN_TOKEN: undefined }), PRODUCTION_BUILD)).toThrow(
      'invalid configuration: ADMIN_TOKEN: is required',
    );
  });
});

describe('development configuration', () => {
  it('accepts the committed .dev.vars.example the tests run on', () => {
    const config = getConfig(env);
    expect(config.environment).toBe('development');
    expect(config.devMode).toBe(true);
    expect(config.sandboxPayments).toBe(true);
    expect(config.jwtSecret).toBe(env.AUTH_JWT_SECRET);
  });

  it('still requires the secrets, with the local minimum lengths', () => {
    expect(namesIn(issuesOf({ ...env, ADMIN_TOKEN: '' }, { devFeatures: true }))).toEqual(['ADMIN_TOKEN']);
    expect(namesIn(issuesOf({ ...env, TOKEN_SECRET: 'short' }, { devFeatures: true }))).toEqual(['TOKEN_SECRET']);
    expect(namesIn(issuesOf({ ...env, DATABASE_URL: '' }, { devFeatures: true }))).toEqual(['DATABASE_URL']);
  });

  it('allows local Postgres without TLS and the WebSocket bridge', () => {
    const config = parseConfig(
      { ...env, DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/postgres', PG_WS_PROXY: '127.0.0.1:8799' },
      { devFeatures: true },
    );
    expect(config.pgWsProxy).toBe('127.0.0.1:8799');
  });
});

describe('the retry schedule', () => {
  it('defaults to the production schedule, also for the empty values .dev.vars.example has', () => {
    const schedule = {
      backoffBaseSeconds: 1,
      backoffCapSeconds: 300,
      outboxRetryCapSeconds: 60,
      resendSeconds: 120,
      resendCapSeconds: 600,
    };
    expect(parseConfig(productionEnv(), PRODUCTION_BUILD).retry).toEqual(schedule);
    expect(getConfig(env).retry).toEqual(schedule);
  });

  it('takes short settings for a drill, as strings or numbers', () => {
    const config = parseConfig(
      productionEnv({
        RETRY_BACKOFF_BASE_SECONDS: '1',
        RETRY_BACKOFF_CAP_SECONDS: '2',
        OUTBOX_RETRY_CAP_SECONDS: '1',
        OUTBOX_RESEND_SECONDS: '3',
        OUTBOX_RESEND_CAP_SECONDS: '6',
      }),
      PRODUCTION_BUILD,
    );
    expect(config.retry).toEqual({
      backoffBaseSeconds: 1,
      backoffCapSeconds: 2,
      outboxRetryCapSeconds: 1,
      resendSeconds: 3,
      resendCapSeconds: 6,
    });
    expect(parseConfig({ ...productionEnv(), OUTBOX_RESEND_SECONDS: 5 }, PRODUCTION_BUILD).retry.resendSeconds).toBe(5);
  });

  it('refuses what is not a whole number of seconds in range, and a cap below its start, naming the variable', () => {
    for (const bad of ['0', '-1', '1.5', 'soon', '43201']) {
      expect(issuesOf(productionEnv({ OUTBOX_RESEND_SECONDS: bad, OUTBOX_RESEND_CAP_SECONDS: '43200' }))).toEqual([
        expect.stringMatching(/^OUTBOX_RESEND_SECONDS: must be a whole number of seconds \(1-43200\)/),
      ]);
    }
    expect(namesIn(issuesOf(productionEnv({ OUTBOX_RESEND_SECONDS: '300', OUTBOX_RESEND_CAP_SECONDS: '60' })))).toEqual([
      'OUTBOX_RESEND_CAP_SECONDS',
    ]);
    expect(namesIn(issuesOf(productionEnv({ RETRY_BACKOFF_BASE_SECONDS: '10', RETRY_BACKOFF_CAP_SECONDS: '5' })))).toEqual([
      'RETRY_BACKOFF_CAP_SECONDS',
    ]);
  });
});

describe('getConfig', () => {
  it('parses once per env object and fails every time for a bad one', () => {
    expect(getConfig(env)).toBe(getConfig(env));
    const bad = { ...env, ADMIN_TOKEN: '' };
    expect(() => getConfig(bad)).toThrow(ConfigError);
    expect(() => getConfig(bad)).toThrow(/ADMIN_TOKEN/);
  });
});
