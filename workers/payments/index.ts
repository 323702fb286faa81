import type { PaymentProvider, ProviderContext } from './provider';
import { createSandboxProvider } from './sandbox';

/** The providers this deployment can use, the one new payments start with first. */
function registered(ctx: ProviderContext): PaymentProvider[] {
  const providers: PaymentProvider[] = [];
  // A deployment plugs its real provider in here (an adapter implementing PaymentProvider
  // that signs its webhook with PAYMENT_WEBHOOK_SECRET).
  // Inline form so staging/production bundles drop the sandbox module (see workers/kernel/build-flags.ts).
  if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
    if (ctx.config.sandboxPayments) {
      providers.push(createSandboxProvider(ctx));
    }
  }
  return providers;
}

/** The provider new payments start with, or undefined when none is configured. */
export function activeProvider(ctx: ProviderContext): PaymentProvider | undefined {
  return registered(ctx)[0];
}

/** The provider a stored payment was made with (its refunds go back through it). */
export function providerNamed(ctx: ProviderContext, name: string): PaymentProvider | undefined {
  return registered(ctx).find((p) => p.name === name);
}

export type { PaymentProvider, ProviderContext } from './provider';
