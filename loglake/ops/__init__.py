"""What an operator asks: the offset-coverage audit, the explained diff, status."""
