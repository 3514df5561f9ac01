"""A hand-written tool loop on the OpenAI SDK, traced by openinference-instrumentation-openai (the
model calls) and OpenInference's own tracer decorators (the agent run and the tool calls, as its
docs show for code without a framework)."""

import json

import _common as c
from openai import OpenAI
from openinference.instrumentation import OITracer, TraceConfig
from openinference.instrumentation.openai import OpenAIInstrumentor

provider = c.tracer_provider("openinference-openai-recording")
OpenAIInstrumentor().instrument(tracer_provider=provider)
tracer = OITracer(provider.get_tracer(__name__), config=TraceConfig())
client = OpenAI(base_url=c.BASE_URL, api_key=c.API_KEY)
TOOLS = {f.__name__: tracer.tool(f) for f in (c.lookup_order, c.cancel_order)}
SCHEMAS = [
    {"type": "function", "function": {"name": name, "description": f.__doc__,
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}
    for name, f in ((f.__name__, f) for f in (c.lookup_order, c.cancel_order))
]  # fmt: skip


@tracer.agent(name=c.AGENT_NAME)
def run(question: str) -> str:
    messages: list = [{"role": "user", "content": question}]
    while True:
        reply = (
            client.chat.completions.create(model=c.MODEL, messages=messages, tools=SCHEMAS).choices[0].message
        )
        if not reply.tool_calls:
            return reply.content or ""
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            try:
                result = TOOLS[call.function.name](**json.loads(call.function.arguments))
            except ValueError as exc:  # the error goes back to the model
                result = f"Error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


print(run(c.QUESTION))
provider.shutdown()
