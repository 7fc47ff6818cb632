"""Azure OpenAI's Batch API for `--batch --provider azure` (`batch.BatchAPI`): OpenAI's Files and Batch APIs
on the resource (`{endpoint}/openai/files`, `/openai/batches`, with `api-version`), through the chat wire's
`AsyncAzureOpenAI` client, so its key or Microsoft Entra ID token signs the batch calls too.

What differs from OpenAI's: each line's `url` and the batch's `endpoint` are `/chat/completions`; each line's
`model` is the deployment's name (`--model`), which must be a batch deployment (deployment type
GlobalBatch or DataZoneBatch): Azure fails a batch naming any other deployment (`model_not_found`, exit 2).
A file holds at most 100,000 requests and 200 MB. The API version must know batches (2024-10-21 and later;
the default). A batch deployment serves batch jobs only: the lines `batch` sends synchronously (past the
deadline, after repeated expiries) go to the same deployment name, which such a deployment refuses.
"""

from __future__ import annotations

from judgebench_flows.calls.openai_batch import OpenAIBatches

AZURE_CHAT_URL = "/chat/completions"


class AzureBatches(OpenAIBatches):
    provider = "azure"
    max_lines = 100_000
    chat_url = AZURE_CHAT_URL
