/** The es-broker version; a test checks it equals package.json's. */
export const version = "0.1.0";
