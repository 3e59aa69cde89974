"""A LangGraph ReAct agent served through dynbranch: only the base URL, key and (optional)
workflow headers differ from an agent pointed at OpenAI.

    dynbranch up --engines 2 --time-scale 0.01      # in one shell; it prints the API's URL
    DYNBRANCH_BASE_URL=http://127.0.0.1:PORT/v1 python examples/langgraph_agent.py

Run it twice: the second run's model calls are answered from the library (exact reuse of the
deterministic, temperature-0 calls), as ``x-dynbranch-source`` shows. On the default simulated
engines the model is a model of an engine: it calls the offered tool, then answers in
pseudo-text.
"""

from __future__ import annotations

import asyncio
import os
import sys

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"{city}: 18 C, light rain"


async def main() -> int:
    base_url = os.environ.get("DYNBRANCH_BASE_URL")
    if not base_url:
        print("set DYNBRANCH_BASE_URL to the URL `dynbranch up` prints (http://HOST:PORT/v1)",
              file=sys.stderr)
        return 2
    model = ChatOpenAI(
        model=os.environ.get("DYNBRANCH_MODEL", "qwen3-32b"),
        base_url=base_url,                                   # 1. the gateway
        api_key=os.environ.get("DYNBRANCH_API_KEY", "unused"),  # 2. its key
        temperature=0,                                       # 3. deterministic: reusable
        default_headers={"x-dynbranch-workflow-id": "weather-agent-1"},  # 4. optional tags
        include_response_headers=True,                       # 5. to print where answers came from
    )
    agent = create_react_agent(model, [get_weather])
    result = await agent.ainvoke({"messages": [("user", "What is the weather in Oslo?")]})
    for message in result["messages"]:
        source = message.response_metadata.get("headers", {}).get("x-dynbranch-source", "")
        calls = [c["name"] for c in getattr(message, "tool_calls", [])]
        print(f"{message.type:>6} {source:<8} {calls or str(message.content)[:70]!s}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
