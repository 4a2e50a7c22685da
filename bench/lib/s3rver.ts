/** The benchmarks' S3 settings for the s3rver they start (bucket `bench`, its fixed S3RVER credentials). */
import { S3Client } from '@aws-sdk/client-s3'

/** An SDK client of the s3rver at `endpoint`, checksums only where S3 requires them (as the store's). */
export function s3rverClient(endpoint: string): S3Client {
  return new S3Client({
    endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  })
}

/** An `s3` store of the attach settings (a file's kebab-case keys) on bucket `bench` of that s3rver. */
export function s3rverStore(endpoint: string): Record<string, unknown> {
  return {
    type: 's3',
    bucket: 'bench',
    region: 'us-east-1',
    endpoint,
    'force-path-style': true,
    'access-key': 'S3RVER',
    'secret-key': 'S3RVER',
  }
}
