from webhooks.app import create_app

app = create_app()
