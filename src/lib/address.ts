/**
 * A socket's local address as a host: undefined when unknown (absent or empty), an IPv4 address
 * mapped into IPv6 (`::ffff:127.0.0.1`, a dual-stack listener's IPv4 peer) as plain IPv4, any
 * other address as it is. Used for the Kafka listener's advertised host per connection
 * (docs/kafka.md "Advertised address").
 */
export function unmappedHost(address: string | undefined): string | undefined {
  if (typeof address !== "string" || address === "") return undefined;
  return address.startsWith("::ffff:") && address.includes(".") ? address.slice(7) : address;
}
