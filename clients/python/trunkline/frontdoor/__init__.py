"""The HTTP front door: OpenAI's and Anthropic's wire APIs in front of the daemon.

A process of its own (`python -m trunkline.frontdoor`, started and watched by the
daemon when `http.listen` is set) that serves HTTP with hypercorn on trio and is a
client of the daemon over the public protocol, like any other: each HTTP request
becomes one canonical request (`submit`), its events become the API's own stream
or body, and a client that hangs up cancels the call.

    app.py                the ASGI application: routes, keys, bounds, hang-ups
    errors.py             an `ErrorInfo` in each API's own error shape and status
    sse.py                server-sent events
    bodies.py             a JSON body read into an API's own shape, refusals naming the field
    openai_chat.py        POST /v1/chat/completions (its body: openai_chat_request.py)
    openai_responses.py   POST /v1/responses
    anthropic_messages.py POST /v1/messages, /v1/messages/count_tokens
    anthropic_request.py  a Messages body -> the canonical request
    anthropic_response.py the canonical response and events -> a message, Anthropic's SSE
    targets.py            which provider (and type) a model name goes to
    models.py             GET /v1/models, in OpenAI's form or Anthropic's
    server.py             the process: hypercorn on the socket the daemon bound
"""
