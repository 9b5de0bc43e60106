"""Serve Keystone's public WSGI application with waitress on 127.0.0.1.

    OS_KEYSTONE_CONFIG_FILES=/path/keystone.conf \
        /usr/bin/python3 keystone_wsgi.py PORT
"""
import sys


def main():
    port = int(sys.argv[1])
    # Keystone parses sys.argv itself when it initialises: leave it nothing.
    sys.argv = ["keystone-public"]
    import waitress
    from keystone.server.wsgi import initialize_public_application

    app = initialize_public_application()
    waitress.serve(app, host="127.0.0.1", port=port, threads=4,
                   ident="keystone")


if __name__ == "__main__":
    main()
