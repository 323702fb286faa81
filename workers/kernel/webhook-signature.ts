import { hmacHex } from './crypto';

// Apart from kernel/webhooks.ts, which the Node tools import too: this one needs WebCrypto's workerd types.

/** `Webhook-Signature`: `v1=` + hex HMAC-SHA256(secret, "{id}.{timestamp}.{body}"), timestamp in Unix seconds. */
export async function webhookSignature(secret: string, id: string, timestamp: number, body: string): Promise<string> {
  return `v1=${await hmacHex(secret, `${id}.${timestamp}.${body}`)}`;
}
