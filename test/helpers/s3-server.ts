import S3rver from 's3rver';

/**
 * s3rver in its own process, because the tests drive the tool with spawnSync, which would block an
 * in-process server's event loop. Prints the port on stdout once listening; stops on SIGTERM.
 * Usage: node --import tsx test/helpers/s3-server.ts DIRECTORY BUCKET
 */
const [directory, bucket] = process.argv.slice(2);
if (!directory || !bucket) throw new Error('usage: s3-server.ts DIRECTORY BUCKET');
const server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory, configureBuckets: [{ name: bucket, configs: [] }] });
const { port } = await server.run();
console.log(port);
process.on('SIGTERM', () => void server.close().then(() => process.exit(0)));
