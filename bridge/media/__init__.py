"""What a user's message brings besides its text, made ready for the agent before the
prompt goes: images and files fetched from Feishu (attachments.py), a voice message heard
as words (voice.py). The core decides what each failure tells the user; these fetch,
decode and recognize."""
