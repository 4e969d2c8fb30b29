"""Vehicle TeleSales: a seller phones a buyer it has never met and must close a valid sale.

catalog.json / catalog.py   the public vehicle catalog (versioned data)
models.py                   the seller brief and the buyer persona (each private to its role)
rules.py                    needs, willingness to pay, the success rule, rewards
scenarios.py                the seeded generator, difficulty tiers, fixed splits
parser.py                   offers, acceptances and leaving, read from any text
game.py                     the turn protocol and the outcome
"""
