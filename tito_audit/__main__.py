from tito_audit.cli import main

main()
