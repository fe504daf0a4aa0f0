/**
 * The runtime's native CRC-32 for storage (`lib/crc32.ts`): the choice and its measurements live
 * in `client/crc.ts`, since the client installs it in user processes too.
 */
export { type Crc32Choice, installFastCrc32, nodeNativeCrc32BytesMin } from "../client/crc.ts";
