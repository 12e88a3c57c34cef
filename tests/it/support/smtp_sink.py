"""A real SMTP server for the e-mail tests: aiosmtpd (PyPI) on 127.0.0.1, keeping each
message it is given as a file, so a test reads exactly what a mail server received.

    smtp_sink.py --port P --dir D [--mode plain|starttls|implicit]
                 [--cert C --key K] [--user U --password W] [--refuse ADDRESS]...

--mode starttls requires STARTTLS before MAIL; implicit speaks TLS from the first byte;
with --user, AUTH (PLAIN or LOGIN, only over TLS unless plain) is required and checked.
Each message is written to D as <n>.eml, with <n>.json holding the envelope (sender,
recipients, the authenticated user, whether it came over TLS) and the message decoded
(subject, text and HTML parts). Prints "READY <port>" once it listens.
"""

import argparse
import email
import email.policy
import json
import logging
import os
import ssl
import sys
import time
import warnings

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


IMPLICIT = False


def a_mode_tls(session):
    return IMPLICIT or session.ssl is not None


class Keep:
    def __init__(self, directory, refuse):
        self.directory = directory
        self.refuse = refuse
        self.count = 0

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address in self.refuse:
            return "550 5.1.1 No such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        base = os.path.join(self.directory, str(self.count))
        raw = envelope.original_content or envelope.content
        # Decoded as a mail client would (RFC 2047 subjects, quoted-printable parts).
        message = email.message_from_bytes(raw, policy=email.policy.default)
        part = lambda kind: message.get_body(preferencelist=(kind,))
        text, html = part("plain"), part("html")
        with open(base + ".eml.part", "wb") as f:
            f.write(raw)
        with open(base + ".json", "w") as f:
            json.dump(
                {
                    "from": envelope.mail_from,
                    "to": envelope.rcpt_tos,
                    "user": session.auth_data if session.authenticated else None,
                    "tls": a_mode_tls(session),
                    "subject": str(message["subject"]),
                    "header_to": str(message["to"]),
                    "content_type": message.get_content_type(),
                    "text": text.get_content() if text else None,
                    "html": html.get_content() if html else None,
                },
                f,
            )
        # Renamed last, so a test never reads half a message.
        os.rename(base + ".eml.part", base + ".eml")
        return "250 Message accepted for delivery"


def authenticator(user, password):
    def check(server, session, envelope, mechanism, auth_data):
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        ok = auth_data.login.decode() == user and auth_data.password.decode() == password
        return AuthResult(success=ok, handled=False, auth_data=auth_data.login.decode())

    return check


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--mode", choices=["plain", "starttls", "implicit"], default="plain")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--refuse", action="append", default=[], help="a recipient to refuse (550)")
    a = p.parse_args()
    global IMPLICIT
    IMPLICIT = a.mode == "implicit"
    # aiosmtpd's own use of its deprecated login_data warns on every AUTH.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    # Implicit TLS: AUTH is over TLS, which aiosmtpd cannot see (above).
    warnings.filterwarnings("ignore", message="Requiring AUTH while not requiring TLS")
    # The same two notices, logged on every connection: only errors are worth a line.
    logging.getLogger("mail.log").setLevel(logging.ERROR)

    context = None
    if a.mode != "plain":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(a.cert, a.key)

    smtp = {}
    if a.user:
        smtp.update(
            authenticator=authenticator(a.user, a.password),
            auth_required=True,
            # Implicit TLS wraps the listening socket, which aiosmtpd's own check
            # does not see; every session there is TLS.
            auth_require_tls=a.mode == "starttls",
        )
    if a.mode == "starttls":
        smtp.update(tls_context=context, require_starttls=True)
    controller = Controller(
        Keep(a.dir, a.refuse),
        hostname="127.0.0.1",
        port=a.port,
        ssl_context=context if a.mode == "implicit" else None,
        ready_timeout=5,
        **smtp,
    )
    controller.start()
    print(f"READY {a.port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        controller.stop()


if __name__ == "__main__":
    sys.exit(main())
