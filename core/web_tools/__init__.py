"""Web tools: `web_fetch` (a page as readable text, through the guarded fetch) and
`web_search` (a configured SearXNG, Brave or Tavily), per chat (`[web_tools]`)."""
