"""Provider adapters: models over the providers' official SDKs, one package per provider
(``openai``, ``anthropic``; ``litellm`` routes through the OpenAI one). What they share is
written once here: ``base`` (the ``SdkModel`` every adapter is: fencing, the stream/complete
flow), ``errors`` (whatever an SDK raised, as a ``ModelCallError`` the loop records honestly),
``fenced_client`` and ``httpx2_fence`` (the SDK's HTTP client, fenced), ``wire`` (Render v1
parts as provider content) and ``sdk_import`` (an SDK missing names its extra). Users build
models with ``threads.openai.openai``, ``threads.anthropic.anthropic`` and
``threads.litellm.litellm``; nothing is imported here, so no SDK loads before one is asked for."""

__all__: list[str] = []
