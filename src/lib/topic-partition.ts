/**
 * One partition of one topic as a string: a map key ({@link topicPartitionKey}) or a name people
 * read ({@link partitionName}). Every module that keys state by partition uses these, so a key
 * built in one place is found in another.
 */

/** Separates the topic from the partition in a key: a character no topic name may contain. */
const keySeparator = "\u0000";

/** The map key of a (topic, partition): `topic` NUL `partition`. Inverse: {@link parseTopicPartitionKey}. */
export function topicPartitionKey(topic: string, partition: number): string {
  return `${topic}${keySeparator}${partition}`;
}

/** The topic and partition of a {@link topicPartitionKey} key. */
export function parseTopicPartitionKey(key: string): { topic: string; partition: number } {
  const at = key.lastIndexOf(keySeparator);
  return { topic: key.slice(0, at), partition: Number(key.slice(at + 1)) };
}

/** A partition's name in messages and logs: `"orders/3"`. */
export function partitionName(topic: string, partition: number): string {
  return `${topic}/${partition}`;
}
