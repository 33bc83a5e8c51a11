"""Google Gemini's native API (`generateContent` / `streamGenerateContent`)."""
